"""XDMoD bucket labels: the boundaries of XDMoD's own tables."""

from __future__ import annotations

import pytest

from pipeline.core.buckets import duration_bucket, gpu_bucket, size_bucket


@pytest.mark.parametrize(("cores", "label"), [
    (1, "1"), (2, "2"), (3, "3 - 4"), (4, "3 - 4"), (5, "5 - 8"), (16, "9 - 16"),
    (17, "17 - 32"), (128, "65 - 128"), (129, "129 - 256"), (1024, "513 - 1024"),
    (1025, "1k - 2k"), (4096, "2k - 4k"), (4097, "> 4k"), (10**7, "> 4k"),
])
def test_size(cores: int, label: str) -> None:
    bucket = size_bucket(cores)
    assert bucket is not None and bucket[1] == label


@pytest.mark.parametrize(("gpus", "label"), [
    (0, "0"), (1, "1"), (8, "8"), (9, "9 - 16"), (16, "9 - 16"), (2048, "1k - 2k"),
    (4097, "> 4k"),
])
def test_gpus(gpus: int, label: str) -> None:
    bucket = gpu_bucket(gpus)
    assert bucket is not None and bucket[1] == label


@pytest.mark.parametrize(("seconds", "label"), [
    (0, "0 - 1s"), (0.999, "0 - 1s"), (1, "1 - 30s"), (29.9, "1 - 30s"), (30, "30s - 30min"),
    (1799, "30s - 30min"), (1800, "30 - 60min"), (3600, "1 - 5hr"), (17999, "1 - 5hr"),
    (18000, "5 - 10hr"), (36000, "10 - 18hr"), (64799, "10 - 18hr"), (64800, "18+hr"),
    (10**9, "18+hr"),
])
def test_durations(seconds: float, label: str) -> None:
    bucket = duration_bucket(seconds)
    assert bucket is not None and bucket[1] == label


def test_ids_sort_in_bucket_order() -> None:
    ids = [duration_bucket(s)[0] for s in (0, 1, 30, 1800, 3600, 18000, 36000, 64800)]  # type: ignore[index]
    assert ids == list(range(8))


@pytest.mark.parametrize("value", [None, -1])
def test_unknown_values_have_no_bucket(value: int | None) -> None:
    assert duration_bucket(value) is None
    assert gpu_bucket(value) is None
    assert size_bucket(value) is None
    assert size_bucket(0) is None
    assert duration_bucket(float("nan")) is None
