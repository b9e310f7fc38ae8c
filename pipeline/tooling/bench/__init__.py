"""``jobstream bench``: the targets of docs/design.md measured in one run on the local stack.

Every figure is taken on the same machine in the same run, so that the targets can be
stated as *ratios* (end-to-end throughput against the ceiling of merely consuming and
decoding the raw topic) rather than as absolute numbers that depend on the hardware.

The phases, each on names of its own (topics, index prefix, Faust app id, consumer groups,
state directories: :mod:`pipeline.tooling.bench.phase_names`), all deleted at the end:

* ``ceilings`` -- consume + Avro-decode + parse the raw topic in one process (events/s);
  bulk-index prebuilt job and event documents with the sink's own bulk client (docs/s);
* ``e2e`` -- a raw topic pre-filled with the workload, then ``jobstream worker`` (one or
  more) and ``jobstream sink`` as child processes: events/s from the worker's first event
  (its Kafka timestamp: ``window``) to the last job document searchable; the cores busy and
  the rate the machine's cores allow at the flow's CPU per event; Elasticsearch writes per
  job; worker memory; the documents checked against the offline fold;
* ``latency`` -- the workload published at a set rate while the flow runs; for a sample of
  jobs, the time from publishing a record to the job document's revision reflecting it
  being searchable (p50, p99);
* ``baseline`` -- what a site would otherwise write: one consumer indexing each event with
  its own index request;
* ``replay`` -- ``jobstream replay`` of the e2e raw topic into a new generation;
* ``memory`` -- (``--tracked-jobs N``) the producer edges publishing N pending jobs and the
  worker tracking them: resident memory of each;
* ``burst`` -- (optional) a ``--burst-tasks`` job array (Flux jobs, a Slurm array's tasks)
  published at once beside the live feed at ``--rate``: the time until every task's
  document is searchable at its final revision, the live feed's p99 meanwhile, the
  tasks' documents checked against the offline fold.

The modules: ``feed`` (workload, expected results, publishing), ``ceilings``, ``flow``
(e2e and latency), ``window`` (where the e2e window starts), ``tracked`` (memory at N
tracked jobs), ``usage`` (node samples), ``burst`` (the job array), ``report`` (table
and JSON), ``run`` (the phases in order), ``cli``.
"""
