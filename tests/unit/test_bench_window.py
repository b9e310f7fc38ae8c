"""Where ``jobstream bench``'s e2e window starts (:mod:`pipeline.tooling.bench.window`): the
earliest timestamp of the events topic, the CPU baselines interpolated between the samples
around it with their bounds, and the figures of the cores (busy, and the rate they allow)."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest

from pipeline.runtime.errors import ServiceError
from pipeline.tooling.bench.rss import CLOCK_TICK_S, RssSampler
from pipeline.tooling.bench.run import BenchOptions, _figures
from pipeline.tooling.bench.window import (
    Clock,
    CpuHistory,
    CpuSample,
    baseline_at,
    earliest_stamp_ms,
)


def _sample(at: float, cpu: dict[str, float], jit: dict[str, float] | None = None,
            read_s: float = 0.002) -> CpuSample:
    return CpuSample(at, at + read_s, cpu, jit or {})


def test_the_start_is_the_earliest_first_record_of_any_partition() -> None:
    # (offset, timestamp) per partition as list-offsets for time 0 answers: -1 for a
    # partition without records
    assert earliest_stamp_ms([(0, 1_700_000_000_250), (0, 1_700_000_000_120),
                              (-1, -1), (0, 1_700_000_000_900)]) == 1_700_000_000_120
    assert earliest_stamp_ms([(-1, -1), (-1, -1)]) is None
    assert earliest_stamp_ms([]) is None


def test_a_baseline_lies_between_the_samples_around_the_start_and_says_how_far_off() -> None:
    samples = [_sample(10.0, {"worker-0": 1.00, "kafka": 5.0}, {"kafka": 0.5}),
               _sample(10.05, {"worker-0": 1.02, "kafka": 5.0}, {"kafka": 0.5}),
               _sample(10.10, {"worker-0": 1.10, "kafka": 5.04}, {"kafka": 0.52}),
               _sample(10.15, {"worker-0": 1.15, "kafka": 5.05}, {"kafka": 0.52})]
    start = 10.076  # between the second and the third sample
    base = baseline_at(samples, start)
    assert 1.02 < base.cpu_s["worker-0"] < 1.10
    assert 5.0 < base.cpu_s["kafka"] < 5.04
    assert 0.5 < base.jit_cpu_s["kafka"] < 0.52
    # the truth is in [earlier reading, later reading + a tick]: the bound covers it
    assert base.error_s["worker-0"] == pytest.approx(0.08 + CLOCK_TICK_S)
    assert base.error_s["kafka"] == pytest.approx(0.04 + CLOCK_TICK_S)
    assert base.gap_s == pytest.approx(10.10 - 10.052)
    # a start during a sample's reading is placed between that sample's neighbours
    during = baseline_at(samples, 10.051)
    assert during.cpu_s["worker-0"] == pytest.approx(1.05)
    assert during.error_s["worker-0"] == pytest.approx(0.10 + CLOCK_TICK_S)


def test_a_start_outside_the_samples_is_refused_not_guessed() -> None:
    samples = [_sample(10.0, {"worker-0": 1.0}), _sample(10.05, {"worker-0": 1.1})]
    with pytest.raises(ServiceError, match="outside the CPU samples"):
        baseline_at(samples, 9.0)
    with pytest.raises(ServiceError, match="outside the CPU samples"):
        baseline_at(samples, 11.0)
    with pytest.raises(ServiceError, match="no samples"):
        baseline_at([], 10.0)


def test_the_clock_places_a_wall_time_on_the_monotonic_clock() -> None:
    clock = Clock.read()
    assert 0 <= clock.error < 0.01
    now_wall, now_mono = time.time(), time.monotonic()
    assert clock.monotonic(now_wall) == pytest.approx(now_mono, abs=0.01)


def test_the_history_samples_every_watched_process() -> None:
    rss = RssSampler()
    rss.watch("bench", os.getpid())
    history = CpuHistory(rss)
    history.sample()
    sum(range(200_000))  # some CPU between the samples
    history.sample()
    first, second = history.samples
    assert first.before <= first.after <= second.before <= second.after
    assert 0 < first.cpu_s["bench"] <= second.cpu_s["bench"]
    assert first.jit_cpu_s == {}  # not a JVM


def test_the_cores_figures_stand_beside_the_ratio() -> None:
    figures = {f.name: f for f in _figures(
        {"consume_decode_ceiling_events_per_s": 20_000.0, "e2e_events_per_s": 4_000.0,
         "e2e_cores_busy": 1.8, "e2e_flow_cpu_ms_per_event": 0.4,
         "e2e_cpu_limit_events_per_s": 5_000.0}, BenchOptions())}
    names = list(figures)
    at = names.index("e2e_ratio_to_ceiling")
    assert names[at + 1:at + 5] == ["e2e_cores_busy", "e2e_flow_cpu_ms_per_event",
                                    "e2e_cpu_limit_events_per_s",
                                    "e2e_cpu_limit_ratio_to_ceiling"]
    assert figures["e2e_cpu_limit_ratio_to_ceiling"].value == 0.25
    assert figures["e2e_cores_busy"].value == 1.8
    assert _figures({"e2e_cpu_limit_events_per_s": 5_000.0},
                    BenchOptions())[at + 4].value is None  # no ceiling measured


def test_the_cpu_limit_is_the_machine_s_cores_over_the_flow_s_cpu_per_event(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from rich.console import Console

    from pipeline.tooling.bench import flow, run
    from pipeline.tooling.bench.window import WindowStart

    window = WindowStart(method="m", error_s=0.001, clock_drift_s=0.0,
                         events_before_at_most=4, first_output_after_s=0.9,
                         cpu_error_s={}, cpu_error_share=None, cpu_sample_gap_s=0.05)
    res = flow.E2EResult(
        workers=1, records=700, events=1000, jobs=100, startup_s=3.0, seconds=2.0,
        writes={}, rss_peak_mib={}, rss_end_mib={},
        cpu_s={"worker-0": 0.2, "sink": 0.1, "kafka": 0.05, "elasticsearch": 0.15,
               "bench": 0.5},
        jit_cpu_s={}, check=flow.DocCheck(), event_documents=1000, window=window)
    monkeypatch.setattr(flow, "run_e2e", lambda *args, **kwargs: res)
    values: dict = {}
    details: dict = {"machine": {"cpus": 2}}
    run._e2e(None, None, None, BenchOptions(), tmp_path, values, details,  # type: ignore[arg-type]
             Console(file=io.StringIO()))
    e2e = details["e2e"]
    # every sampled process in the cores busy, the bench too; not in the flow's CPU
    assert e2e["cores_busy"] == pytest.approx(1.0 / 2.0)
    assert e2e["flow_cpu_ms_per_event"] == pytest.approx(0.5)
    assert e2e["cpu_limit_events_per_s"] == pytest.approx(2 / 0.0005)
    assert values["e2e_cpu_limit_events_per_s"] == e2e["cpu_limit_events_per_s"]
    assert e2e["window"]["first_output_after_s"] == 0.9


def test_the_start_is_asked_of_kafka_as_each_partition_s_first_record_by_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from concurrent.futures import Future
    from types import SimpleNamespace

    from pipeline.runtime.config import Config
    from pipeline.tooling.bench import window

    answers = {0: (0, 1_700_000_000_400), 1: (0, 1_700_000_000_300), 2: (-1, -1)}
    asked: dict = {}

    class Admin:
        def __init__(self, conf: dict) -> None:
            pass

        def list_offsets(self, specs: dict, request_timeout: float) -> dict:
            asked.update(specs)
            out = {}
            for tp in specs:
                future: Future = Future()
                offset, stamp = answers[tp.partition]
                future.set_result(SimpleNamespace(offset=offset, timestamp=stamp))
                out[tp] = future
            return out

    class FakePositions:
        def __init__(self, admin: Admin) -> None:
            pass

        def partitions(self, topics: list[str]) -> list[tuple[str, int]]:
            return [(t, p) for t in topics for p in answers]

    monkeypatch.setattr(window, "AdminClient", Admin)
    monkeypatch.setattr(window, "Positions", FakePositions)
    assert window.first_stamp_ms(Config(), ["ev"]) == 1_700_000_000_300
    # time 0: the first record there is, with its own timestamp
    assert {(tp.topic, tp.partition) for tp in asked} == {("ev", 0), ("ev", 1), ("ev", 2)}
    assert {spec.timestamp for spec in asked.values()} == {0}
    answers.update({0: (-1, -1), 1: (-1, -1)})
    with pytest.raises(ServiceError, match="no record on ev"):
        window.first_stamp_ms(Config(), ["ev"])


def test_the_e2e_window_runs_from_the_first_event_not_the_first_output(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from contextlib import contextmanager
    from types import SimpleNamespace

    from rich.console import Console

    from pipeline.runtime.config import Config
    from pipeline.tooling.bench import flow
    from pipeline.tooling.bench.feed import build_feed, workload_spec
    from pipeline.tooling.bench.window import Clock as RealClock

    feed = build_feed(workload_spec(3, 5, 1000.0, 0.05, start=1_790_000_000.0))
    t0 = time.monotonic()  # about when run_e2e spawns the processes
    start, first_output, last = t0 + 1.075, t0 + 2.0, t0 + 12.0
    end_cpu = {"worker-0": 9.0, "kafka": 6.0}
    rss = SimpleNamespace(cpu_s=dict(end_cpu), peak={}, last={}, sample=lambda: None,
                          jit_cpu_s=lambda: {"kafka": 1.0})

    @contextmanager
    def fake_flow(*args, **kwargs):  # type: ignore[no-untyped-def]
        yield SimpleNamespace(rss=rss)

    def fake_first_output(cfg, f, timeout, history):  # type: ignore[no-untyped-def]
        # the worker idle, then busy from the start on; the first output a batch later
        history.samples += [_sample(t0 + 1.0, {"worker-0": 1.0, "kafka": 2.0}, {"kafka": 0.5}),
                            _sample(t0 + 1.1, {"worker-0": 1.1, "kafka": 2.0}, {"kafka": 0.5}),
                            _sample(first_output, {"worker-0": 2.0, "kafka": 2.5},
                                    {"kafka": 0.6})]
        return first_output

    wall = 1000.0  # the wall clock, this far ahead of the monotonic one
    monkeypatch.setattr(flow, "Clock", SimpleNamespace(read=lambda: RealClock(wall, 0.0)))
    monkeypatch.setattr(flow, "flow", fake_flow)
    monkeypatch.setattr(flow, "_first_output", fake_first_output)
    monkeypatch.setattr(flow, "first_stamp_ms", lambda cfg, topics: round((start + wall) * 1000))
    monkeypatch.setattr(flow, "all_visible", lambda *args: last)
    for name in ("refresh", "job_documents", "expected_documents"):
        monkeypatch.setattr(flow, name, lambda *args: [])
    monkeypatch.setattr(flow, "index_writes", lambda *args: {})
    monkeypatch.setattr(flow, "check_documents", lambda *args: flow.DocCheck())

    res = flow.run_e2e(Config(), None, feed, tmp_path, workers=1, timeout=10.0,  # type: ignore[arg-type]
                       console=Console(file=io.StringIO()))
    assert res.seconds == pytest.approx(last - start, abs=0.002)
    assert res.startup_s == pytest.approx(1.075, abs=0.01)
    # the baselines interpolated at the start, between the samples around it
    assert res.cpu_s["worker-0"] == pytest.approx(9.0 - 1.075, abs=0.01)
    assert res.cpu_s["kafka"] == pytest.approx(4.0)
    assert res.jit_cpu_s["kafka"] == pytest.approx(0.5)
    window = res.window
    assert window.first_output_after_s == pytest.approx(0.925, abs=0.002)
    assert window.cpu_error_s["worker-0"] == pytest.approx(0.1 + CLOCK_TICK_S, abs=0.001)
    assert window.error_s == pytest.approx(0.001)
    assert window.events_before_at_most == max(feed.events)
