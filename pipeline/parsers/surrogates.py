"""Lone UTF-16 surrogates in JSON text: refused, reason ``invalid-utf8``.

Python's json decodes a ``"\\ud800"`` escape to a lone surrogate, which is no character: a
record holding one parses, then cannot be encoded for Kafka or Elasticsearch and fails
later, deep in the worker, as an ``internal-error``. Every JSON parser (Flux and Slurm)
refuses it at parse time instead, with the reason of other non-text input. A pair of
escapes (``"\\ud83d\\ude00"``) decodes to one character and passes.
"""

from __future__ import annotations

import re

from pipeline.runtime.errors import ParseError

__all__ = ["check_surrogates"]

#: A ``\uXXXX`` escape (group 1: its hex digits) of a UTF-16 surrogate: a high one, with
#: (group 2) the low one that completes it, or a low one. Its backslash ends an odd run
#: (``\\ud800`` is an escaped backslash and the text "ud800"); the run starts the match, so
#: the regex engine skips from backslash to backslash, fast.
_SURROGATE_ESCAPE = re.compile(r"\\(?<!\\\\)(?:\\\\)*u([dD][89abAB][0-9a-fA-F]{2}"
                               r"(\\u[dD][c-fC-F][0-9a-fA-F]{2})?|[dD][c-fC-F][0-9a-fA-F]{2})")
#: A surrogate code point, which a str can hold but text decoded from UTF-8 cannot.
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def check_surrogates(source: str, text_given: bool, what: str) -> None:
    """Refuse, as ``invalid-utf8``, the JSON text ``source`` if it decodes to a lone UTF-16
    surrogate: an escape of one (``"\\ud800"``, which Python's json accepts) or, in text
    given as a str (``text_given``), the code point itself. Positions in the message are
    characters of a given str, else bytes of the UTF-8 the text was decoded from.
    """
    # One search per record; the loop runs once per surrogate escape (rare in records; a
    # pair, an emoji, is valid). search() costs less than finditer() when nothing matches.
    found = _SURROGATE_ESCAPE.search(source)
    while found:
        if found[2] is None:
            pos = found.start(1) - 2
            where = f"character {pos}" if text_given else f"byte {len(source[:pos].encode())}"
            raise ParseError("invalid-utf8", f"{what} escapes a lone UTF-16 surrogate, "
                             f"which is not text (\\u{found[1]} at {where})")
        found = _SURROGATE_ESCAPE.search(source, found.end())
    # isascii() is O(1), so ASCII text (most records) costs no scan.
    if text_given and not source.isascii() and (found := _SURROGATE.search(source)):
        raise ParseError("invalid-utf8", f"{what} holds a lone UTF-16 surrogate, which is "
                         f"not text (character {found.start()})")
