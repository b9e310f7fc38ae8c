"""The shapes of the raw records the synthetic workload writes (pure builders).

Slurm's ``{set, infinite, number}`` integers and TRES lists, sacct steps, a pending
``squeue --json`` job, a Flux job's pending journal events, hook environments and node
lists: what :class:`pipeline.tooling.workload.Workload` fills with the jobs it draws. Apart
from it so the workload reads as the jobs' story and these as the sources' formats.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

from pipeline.core.fluid import f58_encode

__all__ = [
    "env_bytes",
    "flux_pending",
    "hostlist_text",
    "iso_time",
    "slurm_number",
    "pick_weighted",
    "sacct_step",
    "squeue_pending",
    "tres_entry",
]


def slurm_number(value: int | None) -> dict[str, Any]:
    """Slurm's ``{set, infinite, number}`` integer (unset for None)."""
    return {"set": value is not None, "infinite": False, "number": value or 0}


def tres_entry(kind: str, count: int, tres_id: int) -> dict[str, Any]:
    return {"type": kind, "name": "", "id": tres_id, "count": count}


def sacct_step(step_id: str, name: str, elapsed: int, cpu_us: int, rss_bytes: int,
                gpu_util: int | None) -> dict[str, Any]:
    """One step of a sacct record: its CPU time (90 % user, 10 % system), its MaxRSS and,
    where accounted, its mean GPU utilisation."""
    user_us = cpu_us * 9 // 10
    system_us = cpu_us - user_us
    average = [{"type": "gres", "name": "gpuutil", "id": 1002, "count": gpu_util}] \
        if gpu_util is not None else []
    return {
        "time": {"elapsed": elapsed,
                 "user": {"seconds": user_us // 10**6, "microseconds": user_us % 10**6},
                 "system": {"seconds": system_us // 10**6,
                            "microseconds": system_us % 10**6}},
        "step": {"id": step_id, "name": name}, "state": ["COMPLETED"],
        "tres": {"requested": {"max": [tres_entry("mem", rss_bytes, 2)], "min": [],
                               "average": average, "total": []}},
    }


def pick_weighted(rng: random.Random, weights: dict[str, int]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def flux_pending(t0: float, ta: float, uid: int, jobid: int, cancelled: bool, how: str
                  ) -> tuple[list[tuple[float, str, dict[str, Any] | None]], str]:
    """The RFC 21 events of a Flux job's wait from ``t0`` until ``ta`` (its alloc, or its
    cancel), and the reason it waits for at ``ta``. A held or dependent job is released
    half-way, unless it is cancelled: then it waits held, or for its dependency, to the end.
    """
    submit = {"userid": uid, "urgency": 0 if how == "held" else 16, "flags": 0, "version": 1}
    events: list[tuple[float, str, dict[str, Any] | None]] = [(t0, "submit", submit)]
    release = t0 + (ta - t0) / 2
    if how == "dependency":
        # on a job submitted just before (the id is only a description to the fold)
        dep = {"description": f"after-success={f58_encode(jobid - (1 << 22))}"}
        events += [(t0 + 0.005, "dependency-add", dep), (t0 + 0.01, "validate", None)]
        if cancelled:
            return events, "dependency"
        events += [(release, "dependency-remove", dep), (release + 0.01, "depend", None),
                   (release + 0.02, "priority", {"priority": 16})]
        return events, "resources"
    events += [(t0 + 0.01, "validate", None), (t0 + 0.02, "depend", None)]
    if how == "held":
        events.append((t0 + 0.03, "priority", {"priority": 0}))
        if cancelled:
            return events, "held"
        events += [(release, "urgency", {"userid": uid, "urgency": 16}),
                   (release + 0.01, "priority", {"priority": 16})]
        return events, "resources"
    events.append((t0 + 0.03, "priority", {"priority": 16}))
    return events, "resources"


def iso_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def env_bytes(env: dict[str, str]) -> bytes:
    return "".join(f"{k}={v}\n" for k, v in sorted(env.items())).encode()


def hostlist_text(hosts: list[str]) -> str:
    """A compact Slurm/RFC 29 host list of consecutive ``<prefix><NNN>`` names."""
    if len(hosts) == 1:
        return hosts[0]
    prefix = hosts[0][:-3]
    return f"{prefix}[{hosts[0][-3:]}-{hosts[-1][-3:]}]"


def squeue_pending(cluster: str, jobid: int, name: str, user: str, uid: int, bank: str,
                    partition: str, qos: str, t_submit: int, limit_min: int, nodes: int,
                    cores: int, tres_req: str, reason: str) -> bytes:
    """A ``squeue --json`` (data_parser v0.0.38, Slurm 22.05) document with one pending job
    waiting for ``reason``."""
    job = {
        "account": bank, "array_job_id": 0, "array_task_id": None, "array_task_string": "",
        "cluster": cluster, "cpus": cores, "eligible_time": t_submit, "end_time": 0,
        "exit_code": 0, "group_id": uid, "group_name": user, "job_id": jobid,
        "job_state": "PENDING", "name": name, "nodes": "", "node_count": nodes,
        "partition": partition, "qos": qos, "restart_cnt": 0, "start_time": 0,
        "state_reason": reason, "submit_time": t_submit, "time_limit": limit_min,
        "tres_req_str": tres_req, "user_id": uid, "user_name": user, "het_job_id": 0,
        "het_job_offset": 0, "current_working_directory": f"/home/{user}/{name}",
    }
    doc = {"meta": {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
                    "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5},
                              "release": "22.05.8"}},
           "errors": [], "jobs": [job]}
    return json.dumps(doc, separators=(",", ":")).encode()
