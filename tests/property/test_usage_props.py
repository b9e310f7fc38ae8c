"""Node samples fold to the same documents whatever their order and copies, and the
cumulative figures never go down as samples arrive (pipeline.fold.usage)."""

from __future__ import annotations

from dataclasses import astuple

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.jsontext import dumps
from pipeline.core.model import JobEvent
from pipeline.fold import JobFold, fold
from tests.unit.test_fold_usage import events, lifecycle, sample

T0 = 1_764_700_000.0

_counter = st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["cg1", "cg2"]),
                     st.sampled_from(["r1", "r2"]))


@st.composite
def samples(draw: st.DrawFn) -> list[JobEvent]:
    """Samples of up to six counters, each read at increasing times with growing CPU."""
    out: list[JobEvent] = []
    for node, epoch, run in draw(st.lists(_counter, min_size=1, max_size=6, unique=True)):
        cpu = 0.0
        for i in range(1, draw(st.integers(1, 5)) + 1):
            cpu += draw(st.floats(0, 60, allow_nan=False))
            out += events(sample(i, cpu, node=node, epoch=epoch, run=run,
                                 mem=draw(st.integers(0, 2**33)),
                                 peak=draw(st.none() | st.integers(0, 2**34)),
                                 final=draw(st.booleans())))
    return out


@settings(max_examples=150, deadline=None)
@given(samples(), st.randoms(use_true_random=False), st.booleans())
def test_order_and_copies_give_the_same_documents(evs: list[JobEvent], rnd, ended: bool
                                                  ) -> None:
    base = lifecycle(end=T0 + 400 if ended else None) + evs
    expected = fold(base)
    shuffled = base + rnd.sample(base, min(len(base), 4))
    rnd.shuffle(shuffled)
    assert fold(shuffled) == expected
    # incrementally, one event at a time, with a state round trip half-way
    jf = JobFold()
    for n, ev in enumerate(shuffled):
        jf.add(ev)
        if n == len(shuffled) // 2:
            jf = JobFold.from_dict(jf.to_dict())
    assert jf.documents() == expected


@settings(max_examples=100, deadline=None)
@given(samples())
def test_cpu_so_far_never_goes_down(evs: list[JobEvent]) -> None:
    jf = JobFold()
    for ev in lifecycle():
        jf.add(ev)
    last = 0.0
    for ev in sorted(evs, key=lambda e: e.timestamp):
        jf.add(ev)
        cpu = jf.documents()[-1]["usage_cpu_s"]
        assert cpu >= last - 1e-9
        last = cpu


def _state_by_astuple(jf: JobFold) -> bytes:
    """The job's state as :meth:`JobFold.to_json` wrote it when each usage row was
    ``dataclasses.astuple`` of its sample (a deep copy of every field)."""
    state = jf.to_dict()
    if "usage" in state:
        state["usage"] = [list(astuple(s)) for s in jf.usage.samples()]
    return dumps(state)


@settings(max_examples=100, deadline=None)
@given(samples(), st.booleans())
def test_usage_rows_are_the_samples_fields_as_astuple_gave_them(evs: list[JobEvent],
                                                               gpus: bool) -> None:
    jf = JobFold()
    for ev in lifecycle() + evs:
        jf.add(ev)
    if gpus:
        jf.add(events(sample(9, 1.0, node="g", gpus=[{"util_pct": 40.0}, {"util_pct": 60}],
                             gpu_busy=3.0, gpu_s=6.0, idle_since=T0))[0])
    assert jf.usage.to_state() == [list(astuple(s)) for s in jf.usage.samples()]
    assert jf.to_json() == _state_by_astuple(jf)
