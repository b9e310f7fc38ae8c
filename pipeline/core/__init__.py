"""The pure core: the canonical model and what is computed from it without I/O.

The model (raw records, canonical job events), host lists and FLUIDs, what the stream
admits of a record, queue snapshots, enrichment, anonymization, XDMoD buckets and compact
JSON text. Everything here is a pure function or a value: no Kafka, no Elasticsearch, no
files, no clock but the one passed in.

May import: ``pipeline.runtime`` (errors) and the standard library. Nothing else of
jobstream: the parsers, the fold, the codecs and everything above import this.
"""
