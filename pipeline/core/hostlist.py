"""Host lists and id sets: Flux RFC 29 hostlists, RFC 22 idsets, and Slurm node lists.

Both schedulers write ``prefix[range,range]suffix`` lists (``node[01-03,7],login1``); ranges
keep their zero padding. Parsing is strict: a malformed list raises ValueError, which the
parsers turn into a ParseError with the record's context.

Size is bounded three ways, each checked before anything is built, because a short text can
name a huge expansion:

* :data:`MAX_DIGITS` -- the digits of one range bound, its zero padding included. Slurm
  reads a bound with ``strtoul`` (at most 20 digits) and prints a name into a buffer of
  ``HOST_NAME_MAX + 16`` characters (``src/common/hostlist.c``, ``_hostrange_string``), so
  no list either scheduler writes comes near 32 digits. The bound comes before ``int()``,
  which refuses more than 4,300 digits with a ValueError of its own and is slow well
  before that;
* :data:`MAX_HOSTS` -- the names one list may expand to, all bracket groups multiplied:
  100,000, far above any machine (the largest systems have tens of thousands of nodes),
  while the million names of a 15-character ``n[0-999][0-999]`` are tens of megabytes;
* :data:`MAX_CHARS` -- the characters all those names add up to: a thousand-digit
  padding on a range of a thousand hosts makes gigabytes of names from a few kilobytes.

The memory an expansion takes is therefore linear in the text plus the names it returns,
and never more than :data:`MAX_CHARS` characters of names.
"""

from __future__ import annotations

import re

__all__ = ["MAX_CHARS", "MAX_DIGITS", "MAX_HOSTS", "expand_hostlist", "expand_idset",
           "idset_size"]

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
#: a list that expands to more names than this is refused rather than eating memory
MAX_HOSTS = 100_000
#: digits of one range bound (``007`` is three): above any width a scheduler prints
MAX_DIGITS = 32
#: characters of all the names of one list together: 100,000 names of 41 characters
MAX_CHARS = 1 << 22


def _number(text: str, what: str) -> int:
    """A range bound as an int; its digits counted before ``int()`` reads them."""
    if not text.isdecimal():
        raise ValueError(f"bad {what}")
    if len(text) > MAX_DIGITS:
        raise ValueError(f"{what}: a number of {len(text)} digits (at most {MAX_DIGITS})")
    return int(text)


def expand_idset(text: str, *, max_ids: int = MAX_HOSTS) -> list[int]:
    """``"0-3,7"`` -> ``[0, 1, 2, 3, 7]`` (RFC 22; ``[...]`` brackets are allowed)."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if not text:
        return []
    out: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if sep and not hi:
            raise ValueError(f"bad idset element {part[:40]!r}")
        what = f"idset element {part[:40]!r}"
        a = _number(lo, what)
        b = _number(hi, what) if sep else a
        if b < a or len(out) + b - a >= max_ids:
            raise ValueError(f"bad idset range {part[:40]!r}")
        out.extend(range(a, b + 1))
    return out


def idset_size(text: str) -> int:
    return len(expand_idset(text))


def _split_top(text: str) -> list[str]:
    """Split on commas that are outside brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in hostlist {text[:80]!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ValueError(f"unbalanced '[' in hostlist {text[:80]!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _ranges(body: str, host: str) -> list[tuple[int, int, int]]:
    """``"01-03,7"`` -> ``[(1, 3, 2), (7, 7, 1)]``: (first, last, zero-padded width)."""
    out = []
    for part in body.split(","):
        lo, sep, hi = part.strip().partition("-")
        what = f"hostlist range {part[:40]!r} in {host[:80]!r}"
        if sep and not hi:
            raise ValueError(f"bad {what}")
        a = _number(lo, what)
        b = _number(hi, what) if sep else a
        if b < a:
            raise ValueError(f"bad {what}")
        out.append((a, b, len(lo)))
    return out


def _expand_one(host: str, max_hosts: int, max_chars: int) -> list[str]:
    """One element, possibly with several bracket groups (``r[1-2]n[01-04]``), if it
    names at most ``max_hosts`` names of at most ``max_chars`` characters in all."""
    pieces: list[str] = []
    groups: list[list[tuple[int, int, int]]] = []
    pos = 0
    for m in _BRACKET.finditer(host):
        pieces.append(host[pos:m.start()])
        groups.append(_ranges(m.group(1), host))
        pos = m.end()
    tail = host[pos:]
    if "[" in tail or "]" in tail or any("[" in p or "]" in p for p in pieces):
        raise ValueError(f"bad hostlist element {host[:80]!r}")
    # Size first: a few short ranges can multiply into billions of names, and a wide
    # padding makes each of them long. A name is never longer than the fixed text plus
    # each group's widest number, so names x that length bounds the characters.
    total = 1
    longest = len(tail) + sum(map(len, pieces))
    for group in groups:
        total *= sum(b - a + 1 for a, b, _ in group)
        if total > max_hosts:
            raise ValueError(f"hostlist element {host[:80]!r} expands past {max_hosts} hosts")
        longest += max(max(w, len(str(b))) for _, b, w in group)
    if total * longest > max_chars:
        raise ValueError(f"hostlist element {host[:80]!r} expands past {max_chars} "
                         "characters")
    names = [""]
    for piece, group in zip(pieces, groups, strict=True):
        names = [f"{n}{piece}{i:0{w}d}" for n in names for a, b, w in group
                 for i in range(a, b + 1)]
    return [n + tail for n in names]


def expand_hostlist(text: str, *, max_hosts: int = MAX_HOSTS,
                    max_chars: int = MAX_CHARS) -> list[str]:
    """``"node[01-02],login1"`` -> ``["node01", "node02", "login1"]``; ``""`` or ``"(null)"``
    (Slurm's word for none) -> ``[]``. ValueError if the list is malformed or names more
    than ``max_hosts`` hosts or ``max_chars`` characters of names."""
    text = text.strip()
    if not text or text in ("(null)", "None"):
        return []
    hosts: list[str] = []
    chars = 0
    for element in _split_top(text):
        names = _expand_one(element, max_hosts - len(hosts), max_chars - chars)
        hosts.extend(names)
        chars += sum(map(len, names))
    return hosts
