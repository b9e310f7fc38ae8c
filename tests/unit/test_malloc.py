"""The worker's malloc setting: a large block freed does not make the next ones come
from the heap (where their holes keep pages resident)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"),
    reason="the setting is glibc's")

# Frees a 4 MiB block, then asks for 512 KiB: mapped of its own (mallinfo2's hblkhd) or
# from the heap. glibc raises its threshold to a freed mapped block's size by default.
_PROBE = """
import ctypes, sys
from pipeline.runtime.malloc import map_large_blocks
if sys.argv[1] == "set":
    map_large_blocks()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
libc.free(libc.malloc(4 << 20))
before = libc.mallinfo2().hblkhd
block = libc.malloc(512 << 10)
print(libc.mallinfo2().hblkhd - before >= 512 << 10)
libc.free(block)
"""


def _mapped(mode: str, **env: str) -> bool:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], env={**environ, **env},
                         check=True, capture_output=True, text=True).stdout
    return out.strip() == "True"


def test_large_blocks_stay_mapped_after_a_larger_one_was_freed() -> None:
    assert not _mapped("default")  # glibc's own behaviour, which the worker changes
    assert _mapped("set")


def test_the_environment_s_threshold_is_left_to_glibc() -> None:
    assert not _mapped("set", MALLOC_MMAP_THRESHOLD_=str(8 << 20))
