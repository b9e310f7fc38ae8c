"""Local tooling: the stack, the benchmark, the demo, the synthetic workload, offline checks.

What a developer or an evaluator runs on one machine: ``jobstream stack``, ``bench``,
``demo``, ``parse``/``fold``, and the workload with its ground truth used by the demo,
the bench and the faults suite.

May import anything of jobstream. Nothing outside the tooling (and the root command
line) imports it.
"""
