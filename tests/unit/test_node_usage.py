"""The node edge's delta logic: the CPU of an interval is never negative, the deltas of a
job whose counter never went back add up to its counter, a counter that went back is a
reset, and a wall clock that went back gives no rate."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.edges.node.usage import CounterTracker, JobSample, cpu_delta


def sample(cpu_s: float, at: float, job_id: str = "4242") -> JobSample:
    return JobSample(scheduler="slurm", job_id=job_id, source="cgroup-v1", sampled_at=at,
                     cpu_usage_s=cpu_s, cpu_user_s=cpu_s, cpu_system_s=0.0,
                     mem_current_bytes=0, mem_peak_bytes=None, mem_rss_bytes=None,
                     mem_file_bytes=None, mem_limit_bytes=None, processes=1,
                     epoch="cg4026531841")


# CPU counters in 1/1024 s steps: dyadic values add and subtract exactly, so that "the
# deltas add up to the counter" can be checked with ==, not within a tolerance.
increments = st.lists(st.tuples(st.integers(0, 2**20), st.integers(1, 60_000)), max_size=40)


@given(increments)
def test_deltas_are_never_negative_and_add_up_to_the_final_counter(
        steps: list[tuple[int, int]]) -> None:
    tracker = CounterTracker()
    counter, clock = 7 * 1024, 1_700_000_000.0
    deltas = [tracker.update(sample(counter / 1024, clock))]
    for cpu_units, ms in steps:
        counter += cpu_units
        clock += ms / 1000
        deltas.append(tracker.update(sample(counter / 1024, clock)))
    assert all(d.cpu_s >= 0 for d in deltas)
    assert sum(d.cpu_s for d in deltas) == counter / 1024
    assert deltas[0].first and deltas[0].interval_s is None
    assert not any(d.reset or d.clock_back or d.first for d in deltas[1:])
    assert all(d.interval_s is not None and d.interval_s > 0 for d in deltas[1:])


@given(st.lists(st.integers(0, 2**30), min_size=1, max_size=40))
def test_a_counter_that_goes_back_is_a_reset_whose_delta_is_the_new_value(
        counters: list[int]) -> None:
    tracker = CounterTracker()
    previous: int | None = None
    for i, value in enumerate(counters):
        delta = tracker.update(sample(value / 1024, 1000.0 + i))
        assert delta.cpu_s >= 0
        went_back = previous is not None and value < previous
        assert delta.reset == went_back
        if went_back or previous is None:
            assert delta.cpu_s == value / 1024
        else:
            assert delta.cpu_s == (value - previous) / 1024
        previous = value


@given(st.lists(st.floats(0, 2e9, allow_nan=False), min_size=2, max_size=30))
def test_a_clock_that_does_not_move_forward_gives_no_interval_never_a_negative_one(
        clocks: list[float]) -> None:
    tracker = CounterTracker()
    tracker.update(sample(0.0, clocks[0]))
    for i in range(1, len(clocks)):
        delta = tracker.update(sample(float(i), clocks[i]))
        assert delta.cpu_s == 1.0
        assert delta.clock_back == (clocks[i] < clocks[i - 1])
        if clocks[i] > clocks[i - 1]:
            assert delta.interval_s == clocks[i] - clocks[i - 1]
            assert delta.cores == 1.0 / delta.interval_s
        else:
            assert delta.interval_s is None and delta.cores is None


def test_a_busy_core_is_one_core_and_the_first_sample_is_all_cpu_so_far() -> None:
    first = cpu_delta(None, sample(12.5, 100.0))
    assert (first.cpu_s, first.interval_s, first.first, first.cores) == (12.5, None, True, None)
    delta = cpu_delta(sample(12.5, 100.0), sample(42.5, 130.0))
    assert (delta.cpu_s, delta.interval_s, delta.cores) == (30.0, 30.0, 1.0)


def test_samples_of_two_jobs_are_refused() -> None:
    with pytest.raises(ValueError, match="two jobs"):
        cpu_delta(sample(1.0, 1.0, job_id="1"), sample(2.0, 2.0, job_id="2"))
