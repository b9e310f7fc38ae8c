"""What the nodes table's RocksDB memtables hold of a worker, by the size of what is written.

``python benchmarks/2026-12-07/memtables.py BYTES [SECONDS]``: four stores opened with the
worker's ``agents.app.STORE_OPTIONS`` (as the nodes table's four partitions), 79 keys (the
feed workload's Flux nodes) written with values of ``BYTES`` every 50 ms for ``SECONDS``
(40); prints the process's RSS before and after, and the bytes written. On 2026-12-07, a
first version (the same options written out, without importing ``agents.app``): values
of 66,000 bytes (a whole window, as before segments) 3,063 MiB written in 40 s, RSS +23
MiB; of 2,000 bytes (a head and a segment) 115 MiB, +14 MiB. This version, 2,000 bytes
for 10 s: 29 MiB written, RSS 64 -> 82 MiB. The memtables fill to their bound whatever
the rate, so fewer bytes written move the worker's RSS by a few MiB, not tens.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import psutil
from faust.stores.rocksdb import RocksDBOptions

from agents.app import STORE_OPTIONS


def main() -> None:
    size = int(sys.argv[1])
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 40.0
    process = psutil.Process()
    options = RocksDBOptions(**STORE_OPTIONS)
    root = Path(tempfile.mkdtemp())
    stores = [options.open(root / f"p{i}.db") for i in range(4)]
    print(f"RSS at start {process.memory_info().rss >> 20} MiB")
    value = os.urandom(size // 2).hex().encode()
    keys = [f"bench:node{i:04d}".encode() for i in range(79)]
    written, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        for i, key in enumerate(keys):
            stores[i % len(stores)][key] = value
            written += len(value)
        time.sleep(0.05)
    print(f"written {written >> 20} MiB, RSS {process.memory_info().rss >> 20} MiB")


if __name__ == "__main__":
    main()
