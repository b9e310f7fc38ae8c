"""The node edge: per-node usage of the jobs running on a node, read from what the kernel
accounts (the jobs' cgroups and ``/proc``) and from NVML, for Slurm and Flux alike.

Section 1 of issue 33. :mod:`.usage` holds the values every reader returns (a
:class:`~.usage.JobSample` per job, or why there is none) and the pure delta logic
(:class:`~.usage.CounterTracker`); :mod:`.cgroups` reads the jobs' cgroups (Slurm's
``cgroup/v1`` and ``cgroup/v2`` layouts, Flux's ``sdexec`` systemd units); :mod:`.procs`
reads the processes whose environment names a job, where no per-job cgroup exists;
:mod:`.gpus` reads the GPUs through NVML and gives each job its GPUs, :mod:`.pids`
telling which job a GPU's process is of; :mod:`.sampler` turns one interval of all of them
into the ``node-usage`` payloads (epochs, GPU integrals, final records); :mod:`.daemon` is
``jobstream edge node``, the sampler on a schedule through the edges' durable spool;
:mod:`.bench` measures what an interval costs.

May import: the readers and the sampler, ``pipeline.runtime`` and ``pipeline.core`` only,
the standard library and ``pynvml`` (a contract of ``[tool.importlinter]``): what runs on
every compute node stays small, and only :mod:`.daemon` reaches the spool and Kafka
through :mod:`pipeline.edges.base`.
"""
