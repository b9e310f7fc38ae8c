"""The waits between attempts of the edges and the sink, and the retry loop."""

from __future__ import annotations

import random

import pytest

from pipeline.runtime.backoff import Backoff, retry


def test_doubles_up_to_the_maximum_and_starts_again_after_a_reset() -> None:
    b = Backoff(1.0, 10.0)
    assert [b.next() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    b.reset()
    assert b.next() == 1.0


def test_full_jitter_within_the_exponential_bound() -> None:
    rng = random.Random(1)
    for failures in range(12):
        bound = min(8.0, 0.5 * 2 ** failures)
        delays = []
        for _ in range(200):
            b = Backoff(0.5, 8.0, jitter=True, rng=rng)
            b.failures = failures
            delays.append(b.next())
        assert all(0.0 <= d <= bound for d in delays)
        # jitter spreads the waits over the whole range, not near the bound only
        assert min(delays) < bound / 4 and max(delays) > bound * 3 / 4


def test_a_long_outage_stays_bounded() -> None:
    b = Backoff(0.5, 5.0, jitter=True, rng=random.Random(0))
    assert max(b.next() for _ in range(10_000)) <= 5.0


class _Flaky:
    """Fails ``times`` times with ``exc``, then answers ``"done"``."""

    def __init__(self, times: int, exc: Exception) -> None:
        self.times, self.exc, self.calls, self.waits = times, exc, 0, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.times:
            raise self.exc
        return "done"

    def wait(self) -> None:
        self.waits += 1


def test_retry_waits_between_attempts_until_one_succeeds() -> None:
    flaky = _Flaky(3, BufferError())
    assert retry(flaky, on=BufferError, wait=flaky.wait) == "done"
    assert (flaky.calls, flaky.waits) == (4, 3)


def test_retry_gives_up_after_its_attempts_and_on_what_is_not_retriable() -> None:
    flaky = _Flaky(5, ValueError("x"))
    with pytest.raises(ValueError):
        retry(flaky, on=ValueError, wait=flaky.wait, attempts=3)
    assert (flaky.calls, flaky.waits) == (3, 2)
    fatal = _Flaky(5, ValueError("fatal"))
    with pytest.raises(ValueError):
        retry(fatal, on=ValueError, wait=fatal.wait, retriable=lambda exc: "fatal" not in str(exc))
    assert fatal.calls == 1
    other = _Flaky(1, KeyError("k"))
    with pytest.raises(KeyError):
        retry(other, on=ValueError, wait=other.wait)
