"""The Elasticsearch sink: Kafka topics of the agents -> versioned, idempotent bulk writes.

One module per concern, each tested alone (after Kafka Connect's Elasticsearch sink):

* :mod:`~pipeline.sink.names` -- index and alias names, generations, months;
* :mod:`~pipeline.sink.templates` -- index templates, index creation, alias swaps;
* :mod:`~pipeline.sink.converter` -- record -> bulk action, coalescing;
* :mod:`~pipeline.sink.client` -- bulk with retries, item classification, splitting a
  request refused as a whole;
* :mod:`~pipeline.sink.deadletter` -- dead letters the DLQ can always take;
* :mod:`~pipeline.sink.offsets` -- contiguous acknowledged offsets;
* :mod:`~pipeline.sink.consumer` -- the consumer: batches, pausing, rebalances, commits;
* :mod:`~pipeline.sink.settlement` -- each record's fate: counted, dead-lettered or failed;
* :mod:`~pipeline.sink.crashes` -- the crash guard's coordinates
  (:mod:`pipeline.runtime.crashguard`), the record-by-record mode;
* :mod:`~pipeline.sink.stats` -- a run's totals and the consumer lag metric;
* :mod:`~pipeline.sink.runner` -- the loop and the flush, under the crash guard;
* :mod:`~pipeline.sink.cli` -- ``jobstream sink``.

May import: ``pipeline.kafka``, ``pipeline.codecs``, ``pipeline.fold``, ``pipeline.parsers``,
``pipeline.core``, ``pipeline.runtime``. Not the agents (it reads their topics, not their
code), the edges, the dashboards or the tooling.
"""
