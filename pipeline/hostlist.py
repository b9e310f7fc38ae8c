"""Host lists and id sets: Flux RFC 29 hostlists, RFC 22 idsets, and Slurm node lists.

Both schedulers write ``prefix[range,range]suffix`` lists (``node[01-03,7],login1``); ranges
keep their zero padding. Parsing is strict: a malformed list raises ValueError, which the
parsers turn into a ParseError with the record's context.
"""

from __future__ import annotations

import re

__all__ = ["expand_hostlist", "expand_idset", "idset_size"]

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
#: a safety bound: a list that expands past this is rejected rather than eating memory
MAX_HOSTS = 1_000_000


def expand_idset(text: str) -> list[int]:
    """``"0-3,7"`` -> ``[0, 1, 2, 3, 7]`` (RFC 22; ``[...]`` brackets are allowed)."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if not text:
        return []
    out: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad idset element {part!r}")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a or len(out) + b - a >= MAX_HOSTS:
            raise ValueError(f"bad idset range {part!r}")
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
                raise ValueError(f"unbalanced ']' in hostlist {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ValueError(f"unbalanced '[' in hostlist {text!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _ranges(body: str, host: str) -> list[tuple[int, int, int]]:
    """``"01-03,7"`` -> ``[(1, 3, 2), (7, 7, 1)]``: (first, last, zero-padded width)."""
    out = []
    for part in body.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad hostlist range {part!r} in {host!r}")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ValueError(f"bad hostlist range {part!r} in {host!r}")
        out.append((a, b, len(lo)))
    return out


def _expand_one(host: str) -> list[str]:
    """One element, possibly with several bracket groups (``r[1-2]n[01-04]``)."""
    pieces: list[str] = []
    groups: list[list[tuple[int, int, int]]] = []
    pos = 0
    for m in _BRACKET.finditer(host):
        pieces.append(host[pos:m.start()])
        groups.append(_ranges(m.group(1), host))
        pos = m.end()
    tail = host[pos:]
    if "[" in tail or "]" in tail or any("[" in p or "]" in p for p in pieces):
        raise ValueError(f"bad hostlist element {host!r}")
    # Size first: a few short ranges can multiply into billions of names.
    total = 1
    for group in groups:
        total *= sum(b - a + 1 for a, b, _ in group)
        if total > MAX_HOSTS:
            raise ValueError(f"hostlist element {host!r} expands past {MAX_HOSTS} hosts")
    names = [""]
    for piece, group in zip(pieces, groups, strict=True):
        names = [f"{n}{piece}{i:0{w}d}" for n in names for a, b, w in group
                 for i in range(a, b + 1)]
    return [n + tail for n in names]


def expand_hostlist(text: str) -> list[str]:
    """``"node[01-02],login1"`` -> ``["node01", "node02", "login1"]``; ``""`` or ``"(null)"``
    (Slurm's word for none) -> ``[]``."""
    text = text.strip()
    if not text or text in ("(null)", "None"):
        return []
    hosts: list[str] = []
    for element in _split_top(text):
        hosts.extend(_expand_one(element))
        if len(hosts) > MAX_HOSTS:
            raise ValueError("hostlist too long")
    return hosts
