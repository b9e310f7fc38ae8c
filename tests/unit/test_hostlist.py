import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.hostlist import expand_hostlist, expand_idset


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
