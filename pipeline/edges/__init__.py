"""Producer edges: daemons beside the schedulers that put raw records on ``hpc.jobs.raw``.

Every edge writes through :class:`pipeline.edges.base.EdgeRuntime`: a record is encoded as
an Avro ``RawRecord``, stored in the edge's durable spool, and only then acknowledged to
its source; the spool's drainer sends it to Kafka. ``flux`` reads the Flux job-manager
and resource journals, ``slurm`` runs the Slurm sources (jobcomp HTTP receiver,
jobcomp/kafka bridge, hook listener, reconciliation poller); ``node`` samples the usage of
the jobs on a compute node (``pipeline.edges.node``).

May import: ``pipeline.kafka`` (the producer policy), ``pipeline.codecs``,
``pipeline.parsers``, ``pipeline.core``, ``pipeline.runtime``. Not the agents, the sink,
the dashboards or the tooling: a daemon beside the scheduler stays small.
"""
