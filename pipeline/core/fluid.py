"""Flux job ids (FLUIDs, RFC 19): decimal <-> f58 <-> dothex, in pure Python.

A FLUID is a 64-bit unsigned integer. Flux prints it in several encodings; jobstream keys
jobs by the decimal string and keeps the f58 form beside it, as ``flux jobs`` shows it.
``flux.job.JobID`` needs libflux-core, which agents and parsers must not depend on, hence
this module. Decoding follows RFC 19's rules (which encoding a string is in is decided by
its look), except that mnemonic words and emoji are not supported.

Functions raise ``ValueError`` with a readable message; parsers turn it into a ParseError.
"""

from __future__ import annotations

import re

__all__ = [
    "F58_ALPHABET",
    "FLUID_MAX",
    "decode_jobid",
    "dothex_decode",
    "dothex_encode",
    "f58_decode",
    "f58_encode",
]

F58_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_F58_INDEX = {c: i for i, c in enumerate(F58_ALPHABET)}
#: Flux prints "ƒ" (U+0192) in UTF-8 locales and accepts an ASCII "f" as well.
F58_PREFIX = "\u0192"
FLUID_MAX = 2**64 - 1
_DOTHEX = re.compile(r"[0-9a-fA-F]{1,4}(?:\.[0-9a-fA-F]{1,4}){3}")
_HEX = re.compile(r"0[xX][0-9a-fA-F]{1,16}")
_DEC = re.compile(r"[0-9]{1,20}")


def _check_range(n: int) -> int:
    if not 0 <= n <= FLUID_MAX:
        raise ValueError(f"job id {n} is outside the 64-bit FLUID range")
    return n


def f58_encode(n: int, prefix: str = F58_PREFIX) -> str:
    """``263721058304`` -> ``"ƒ7vo8MjM"`` (most significant digit first)."""
    _check_range(n)
    digits = []
    while n:
        n, r = divmod(n, 58)
        digits.append(F58_ALPHABET[r])
    return prefix + ("".join(reversed(digits)) or F58_ALPHABET[0])


def f58_decode(text: str) -> int:
    """``"ƒ7vo8MjM"`` or ``"f7vo8MjM"`` -> ``263721058304``."""
    s = text.strip()
    if s[:1] not in (F58_PREFIX, "f"):
        raise ValueError(f"f58 job id {text!r} must start with '\u0192' or 'f'")
    s = s[1:]
    # 2**64 - 1 has 11 base58 digits; RFC 19 allows at most 12 with leading ones.
    if not s or len(s) > 12:
        raise ValueError(f"f58 job id {text!r} has no or too many digits")
    n = 0
    for c in s:
        try:
            n = n * 58 + _F58_INDEX[c]
        except KeyError:
            raise ValueError(f"f58 job id {text!r}: {c!r} is not a base58 digit") from None
    return _check_range(n)


def dothex_encode(n: int) -> str:
    """``263721058304`` -> ``"0000.003d.6700.0000"`` (the KVS directory form)."""
    _check_range(n)
    return ".".join(f"{(n >> shift) & 0xFFFF:04x}" for shift in (48, 32, 16, 0))


def dothex_decode(text: str) -> int:
    """``"0000.003d.6700.0000"`` (or the KVS key ``"job.0000.003d.6700.0000"``) -> int."""
    s = text.strip()
    if s.startswith("job."):
        s = s[4:]
    if not _DOTHEX.fullmatch(s):
        raise ValueError(f"dothex job id {text!r} is not four dot-separated 16-bit hex groups")
    n = 0
    for group in s.split("."):
        n = (n << 16) | int(group, 16)
    return n


def decode_jobid(value: int | str) -> int:
    """A job id as Flux writes it (JSON integer, decimal, f58, hex, dothex, kvs) -> int.

    Booleans and negative numbers are refused; ``-1`` (FLUX_JOBID_ANY) is the caller's
    business, since only the journal sentinel may carry it.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"job id must be an integer or a string, not {type(value).__name__}")
    if isinstance(value, int):
        return _check_range(value)
    s = value.strip()
    if not s:
        raise ValueError("job id is empty")
    if "." in s:
        return dothex_decode(s)
    if "-" in s:
        raise ValueError(f"job id {value!r}: mnemonic (words) job ids are not supported")
    if s[0] in (F58_PREFIX, "f"):
        return f58_decode(s)
    if _HEX.fullmatch(s):
        return _check_range(int(s, 16))
    if _DEC.fullmatch(s):
        return _check_range(int(s))
    raise ValueError(f"job id {value!r} is not decimal, f58, hex or dothex")
