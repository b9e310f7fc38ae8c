"""The Slurm parsers: jobcomp records, ``squeue``/``sacct`` JSON, slurmctld hook environments.

One module per source family (``slurm_jobcomp``, ``slurm_json``, ``slurm_hook``), with the
shape helpers they share in ``slurm_common``; this module is the entry point the format
registry (:mod:`pipeline.parsers`) loads.

Formats and versions read (``docs/slurm.md``, "What the Slurm parsers rely on"):

* ``slurm-jobcomp``: jobcomp/kafka (23.02+) and jobcomp/elasticsearch records, Slurm 22.05
  to 26.x, one JSON object per record (trailing NUL of kafka <= 23.11.6 tolerated).
* ``slurm-squeue`` / ``slurm-sacct``: ``--json`` documents of data_parser v0.0.38 (22.05)
  to v0.0.4x (23.02 .. 26.x).
* ``slurm-hook``: PrologSlurmctld / EpilogSlurmctld environments, ``env`` output or JSON.
* ``slurm-submit-plugin``: lines of jobstream's job_submit.lua and cli_filter.lua
  (submissions with their job id, changes of queued jobs, refused submissions).

Every event's ``event_id`` includes the source family (jobcomp, squeue, sacct, hook): the
same moment reported by two sources has two ids, and the fold merges their facts.
"""

from __future__ import annotations

from pipeline.parsers.slurm_hook import parse_hook
from pipeline.parsers.slurm_jobcomp import parse_jobcomp
from pipeline.parsers.slurm_json import parse_sacct, parse_squeue
from pipeline.parsers.slurm_submit import parse_submit_plugin

__all__ = ["parse_hook", "parse_jobcomp", "parse_sacct", "parse_squeue", "parse_submit_plugin"]
