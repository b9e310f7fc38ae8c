import tracemalloc
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.hostlist import expand_hostlist, expand_idset


@pytest.mark.parametrize("text,hosts", [
    ("node[186-189]", ["node186", "node187", "node188", "node189"]),
    ("vm", ["vm"]),
    ("", []),
    ("(null)", []),
    ("n[01-03,7]x,login1", ["n01x", "n02x", "n03x", "n7x", "login1"]),
    ("r[1-2]n[01-02]", ["r1n01", "r1n02", "r2n01", "r2n02"]),
])
def test_expand(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["n[3-1]", "n[a]", "n[1", "n]1", "n[0-999][0-999][0-999]",
                                  "n[1-]", "n[[1]]"])
def test_malformed_or_huge_lists_are_value_errors(text):
    with pytest.raises(ValueError):
        expand_hostlist(text)


def test_many_bracket_groups_do_not_recurse():
    assert expand_hostlist("x" + "[1]" * 5000) == ["x" + "1" * 5000]


def test_idset():
    assert expand_idset("0-3,7") == [0, 1, 2, 3, 7]
    assert expand_idset("[5]") == [5]
    with pytest.raises(ValueError):
        expand_idset("3-1")


@given(st.text(max_size=40))
def test_any_text_gives_a_list_or_a_value_error(text):
    try:
        assert isinstance(expand_hostlist(text), list)
    except ValueError:
        pass


# --------------------------------------------------------------------------- size bounds
# Issue 31, class 4: the caps counted hosts, not characters, and were checked after int()
# read the digits. Each case below is refused before anything is built.

def _peak(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
    except ValueError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("text", [
    "node[" + "0" * 3000 + "1-100000]",  # 100,000 names of 3,005 characters
    "node[" + "0" * 10_000 + "1-2]",
    "x" * 1000 + "[1-100000]",  # 100 M characters from 1 KB
    "n[0-999][" + "0" * 40 + "-9]",
])
def test_a_list_of_wide_names_is_refused_before_it_is_expanded(text: str) -> None:
    with pytest.raises(ValueError):
        expand_hostlist(text)
    assert _peak(lambda: expand_hostlist(text)) < 64 * len(text) + (1 << 20)


@pytest.mark.parametrize("text", ["n[" + "1" * 5000 + "]", "n[0-" + "9" * 4301 + "]",
                                  "n[" + "0" * 33 + "1]"])
def test_a_range_bound_of_more_than_32_digits_is_refused_with_that_reason(text: str) -> None:
    with pytest.raises(ValueError, match=r"at most 32"):
        expand_hostlist(text)


def test_widths_up_to_the_bound_still_expand() -> None:
    assert expand_hostlist("n[" + "0" * 31 + "1-2]") == ["n" + "0" * 31 + "1",
                                                          "n" + "0" * 31 + "2"]


def test_the_character_budget_is_the_whole_lists() -> None:
    per = "y" * 100 + "[1-10]"  # 10 names of 101-102 characters
    assert len(expand_hostlist(per, max_chars=1100)) == 10
    with pytest.raises(ValueError, match="characters"):
        expand_hostlist(f"{per},{per}", max_chars=1100)
    with pytest.raises(ValueError, match="hosts"):
        expand_hostlist("a[1-6],b[1-5]", max_hosts=10)
    assert len(expand_hostlist("a[1-5],b[1-5]", max_hosts=10)) == 10


@pytest.mark.parametrize("text", ["0-" + "9" * 5000, "0-" + "9" * 33])
def test_an_idset_bound_of_more_than_32_digits_is_refused_with_that_reason(text: str) -> None:
    with pytest.raises(ValueError, match=r"at most 32"):
        expand_idset(text)


def test_a_million_names_from_fifteen_characters_are_refused() -> None:
    with pytest.raises(ValueError, match="100000 hosts"):
        expand_hostlist("n[0-999][0-999]")
    assert len(expand_hostlist("n[0-99][0-999]")) == 100_000
