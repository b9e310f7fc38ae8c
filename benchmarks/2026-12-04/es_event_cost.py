"""What one event document costs Elasticsearch, per events mapping: Elasticsearch's CPU
seconds per 1,000 documents and bytes on disk per document (issue 35, item 2).

The bench's workload (``workload_spec``, seed 1, fixed start) folded into its canonical
events as the sink decodes them (``ceilings.worker_event_documents``), the first
``--docs`` of them, bulk-indexed by the sink's own ``BulkClient`` in batches of
``sink.max_batch`` into a fresh private index (``escost-<variant>-<round>-...``) made with
each variant's settings and mappings; the variants alternate, ``--rounds`` times. CPU is
the local stack's Elasticsearch process's user + system time from /proc (psutil), from
just before the first bulk request until the index has settled (the bulk's end, then no
merge running and three seconds of quiet), less the idle rate measured over
``--idle-s`` before each run; ``index_cpu_s`` stops at the last bulk answer. Size: the
primaries' store after a refresh and a flush, then after a force-merge to one segment.
Every index is deleted at the end of its run.

Variants: ``before`` (``--before``, the mapping of main), ``after`` (the package's
``hpc-job-events.json``) and ``after-refresh5s`` (the same with a 5 s refresh interval);
on request (``--variants``) ``after-context-unindexed``, what indexing ``context`` costs.
Run from the repository root with the local stack up, nothing else on the cores:
``python benchmarks/2026-12-04/es_event_cost.py --before /tmp/before.json --json out.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import psutil
from elasticsearch import Elasticsearch

from pipeline.replay.readback import client
from pipeline.runtime.config import Config, load_config
from pipeline.sink.client import BulkClient
from pipeline.sink.converter import Converter
from pipeline.sink.names import Family
from pipeline.sink.templates import family_body
from pipeline.tooling.bench.ceilings import worker_event_documents
from pipeline.tooling.bench.feed import build_feed, workload_spec
from pipeline.tooling.stack import status

START = 1_794_000_000.0  # 2026-11-06: every event in one month, one index
EVENTS_PER_JOB = 14.8  # measured on this workload (14,847 events of 1,000 jobs)


def es_process(cfg: Config) -> psutil.Process:
    for svc in status(cfg):
        if svc.name == "elasticsearch" and svc.running and svc.pid is not None:
            return psutil.Process(svc.pid)
    raise SystemExit("the local stack's Elasticsearch is not running")


def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def settle(es: Elasticsearch, index: str, proc: psutil.Process) -> None:
    """Until no merge runs and Elasticsearch used under 2 % of a core for 3 s."""
    quiet_since = None
    last = cpu_s(proc)
    while True:
        time.sleep(0.5)
        now = cpu_s(proc)
        merges = es.indices.stats(index=index, metric="merge")["_all"]["primaries"][
            "merges"]["current"]
        if merges == 0 and now - last < 0.01:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= 3.0:
                return
        else:
            quiet_since = None
        last = now


def store(es: Elasticsearch, index: str) -> tuple[int, int, int]:
    st = es.indices.stats(index=index, metric=["store", "docs", "segments"])
    p = st["_all"]["primaries"]
    return p["store"]["size_in_bytes"], p["docs"]["count"], p["segments"]["count"]


def run(es: Elasticsearch, cfg: Config, proc: psutil.Process, variant: str, rnd: int,
        body: dict[str, Any], events: list[dict[str, Any]], idle_s: float) -> dict[str, Any]:
    prefix = f"escost-{variant}-{rnd}-"
    actions = [Converter(prefix, "v1").event(e) for e in events]
    (index,) = {a.index for a in actions}
    es.indices.create(index=index, settings=body["settings"], mappings=body["mappings"])
    es.cluster.health(index=index, wait_for_status="green", timeout="60s")
    c0, t0 = cpu_s(proc), time.monotonic()
    time.sleep(idle_s)
    idle_rate = (cpu_s(proc) - c0) / (time.monotonic() - t0)
    bulk = BulkClient(es)
    batch = max(cfg.sink.max_batch, 1)
    c1, t1 = cpu_s(proc), time.monotonic()
    for i in range(0, len(actions), batch):
        for result in bulk.write(actions[i:i + batch]):
            if not result.outcome.done:
                raise SystemExit(f"{result.action.doc_id}: {result.status} "
                                 f"{result.error_type} {result.error}")
    c2, t2 = cpu_s(proc), time.monotonic()
    settle(es, index, proc)
    c3, t3 = cpu_s(proc), time.monotonic()
    es.indices.refresh(index=index)
    es.indices.flush(index=index)
    size, count, segments = store(es, index)
    es.indices.forcemerge(index=index, max_num_segments=1)
    merged, _, _ = store(es, index)
    es.indices.delete(index=index)
    n = len(actions)
    total = (c3 - c1) - idle_rate * (t3 - t1)
    out = {"variant": variant, "round": rnd, "docs": n, "count": count,
           "bulk_s": round(t2 - t1, 2), "docs_per_s": round(n / (t2 - t1)),
           "index_cpu_s": round((c2 - c1) - idle_rate * (t2 - t1), 2),
           "settle_s": round(t3 - t2, 1),
           "cpu_s": round(total, 2), "cpu_ms_per_1000": round(total / n * 1e6, 1),
           "idle_cpu_per_s": round(idle_rate, 4), "segments": segments,
           "bytes_per_doc": round(size / count, 1),
           "bytes_per_doc_merged": round(merged / count, 1)}
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True,
                    help="the events mapping file to compare with (main's)")
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle-s", type=float, default=5.0)
    ap.add_argument("--usage-interval-s", type=float, default=None,
                    help="node samples every this many seconds of a job (default none, as "
                         "the bench)")
    ap.add_argument("--variants", default="before,after,after-refresh5s")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cfg = load_config()
    before = json.loads(args.before.read_text())
    after = json.loads(json.dumps(family_body(Family.EVENTS)))
    slow = json.loads(json.dumps(after))
    slow["settings"]["index"]["refresh_interval"] = "5s"
    # not a candidate (the overview searches and groups context): what indexing it costs
    bare = json.loads(json.dumps(after))
    bare["mappings"]["properties"]["context"].update(index=False, doc_values=False)
    bodies = {"before": before, "after": after, "after-refresh5s": slow,
              "after-context-unindexed": bare}
    variants = args.variants.split(",")
    spec = dataclasses.replace(
        workload_spec(1, math.ceil(args.docs / EVENTS_PER_JOB * 1.05), 2000, 1.0, start=START),
        usage_interval_s=args.usage_interval_s)
    t = time.monotonic()
    events = worker_event_documents(cfg, build_feed(spec))
    if len(events) < args.docs:
        raise SystemExit(f"the workload made {len(events)} events, fewer than {args.docs}")
    events = events[:args.docs]
    names: dict[str, int] = {}
    for e in events:
        names[e["event"]] = names.get(e["event"], 0) + 1
    source = sum(len(json.dumps(Converter().event(e).source, separators=(",", ":")))
                 for e in events) / len(events)
    print(f"{len(events)} events in {time.monotonic() - t:.0f} s, _source {source:.1f} "
          f"bytes/doc on average, by name {names}", flush=True)
    es = client(cfg, timeout=600.0)
    proc = es_process(cfg)
    es.options(ignore_status=404).indices.delete(index="escost-*", expand_wildcards="all")
    runs = [run(es, cfg, proc, v, r, bodies[v], events, args.idle_s)
            for r in range(1, args.rounds + 1) for v in variants]
    summary = {}
    for v in variants:
        mine = [x for x in runs if x["variant"] == v]
        summary[v] = {k: [x[k] for x in mine] for k in (
            "cpu_ms_per_1000", "index_cpu_s", "cpu_s", "docs_per_s", "bytes_per_doc",
            "bytes_per_doc_merged")}
        summary[v]["cpu_ms_per_1000_median"] = statistics.median(
            summary[v]["cpu_ms_per_1000"])
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({
            "docs": args.docs, "rounds": args.rounds, "usage_interval_s": args.usage_interval_s,
            "source_bytes_per_doc": round(source, 1), "events_by_name": names,
            "elasticsearch_pid": proc.pid, "runs": runs, "summary": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
