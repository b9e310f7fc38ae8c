"""Any hostlist text either raises ValueError or expands within its bounds, in memory
linear in the text and the names it returns (issue 31, class 4).

The lists are built the way a hostile or broken record would write them: zero paddings up
to thousands of digits, bounds of up to thousands of digits, several bracket groups that
multiply, long prefixes, many elements. The bounds are passed small, so that lists at and
past them are cheap to try; the defaults are the same code.
"""

from __future__ import annotations

import tracemalloc

from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipeline.core.hostlist import expand_hostlist

MAX_HOSTS = 2_000
MAX_CHARS = 40_000
#: a generous linear budget: bytes per character of text, per character and per name
#: returned (a str object's header and the lists' pointers, two lists at a time), and once
PER_TEXT_CHAR, PER_NAME_CHAR, PER_NAME, ONCE = 128, 4, 256, 256 * 1024

_widths = st.one_of(st.integers(0, 6), st.sampled_from([20, 31, 32, 33, 200, 5000]))
_numbers = st.one_of(st.integers(0, 300), st.integers(0, 10**6),
                     st.sampled_from([10**19, 2**64, 10**31, 10**40]))


@st.composite
def _range(draw: st.DrawFn) -> str:
    lo = draw(_numbers)
    text = str(lo).zfill(draw(_widths))
    if draw(st.booleans()):
        hi = lo + draw(st.one_of(st.integers(0, 50), st.integers(0, 2_500),
                                 st.integers(0, 10**6)))
        text += "-" + str(hi).zfill(draw(st.integers(0, 3)))
    return text


@st.composite
def _element(draw: st.DrawFn) -> str:
    text = draw(st.one_of(st.text("abcnode-_.", max_size=12),
                          st.sampled_from(["x" * 1000, "y" * 30_000])))
    for _ in range(draw(st.integers(0, 3))):
        ranges = draw(st.lists(_range(), min_size=1, max_size=4))
        text += "[" + ",".join(ranges) + "]" + draw(st.text("ab.", max_size=3))
    return text


hostlists = st.one_of(
    st.lists(_element(), min_size=1, max_size=6).map(",".join),
    st.text(max_size=60),
    st.text("n[]0123456789-,", max_size=80),
)


def _measure(text: str) -> tuple[list[str] | None, int]:
    tracemalloc.start()
    try:
        hosts: list[str] | None = expand_hostlist(text, max_hosts=MAX_HOSTS,
                                                  max_chars=MAX_CHARS)
    except ValueError:
        hosts = None
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return hosts, peak


@settings(max_examples=300, deadline=None)
@given(hostlists)
@example("node[" + "0" * 10_000 + "1-2]")
@example("x" * 30_000 + "[0-3]")
@example("n[0-999][0-999]")
@example("n[0-43][0-43]")  # 1,936 names: under MAX_HOSTS
@example("n[0-44][0-44]")  # 2,025: over
@example("n" * 16 + "[0-1999]")  # 2,000 names of at most 20 characters: MAX_CHARS
@example("n" * 17 + "[0-1999]")  # of at most 21: over
def test_a_hostlist_expands_within_its_bounds_in_linear_memory_or_is_refused(
        text: str) -> None:
    hosts, peak = _measure(text)
    if hosts is None:  # refused: what it took is what reading the text took
        assert peak <= PER_TEXT_CHAR * len(text) + ONCE, (len(text), peak)
        return
    chars = sum(map(len, hosts))
    assert len(hosts) <= MAX_HOSTS and chars <= MAX_CHARS
    assert peak <= (PER_TEXT_CHAR * len(text) + PER_NAME_CHAR * chars + PER_NAME * len(hosts)
                    + ONCE), (len(text), len(hosts), chars, peak)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_a_list_within_the_default_bounds_or_a_value_error(text: str) -> None:
    try:
        hosts = expand_hostlist(text)
    except ValueError:
        return
    assert all(isinstance(h, str) and h for h in hosts)
