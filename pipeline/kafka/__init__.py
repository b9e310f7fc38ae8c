"""Kafka wiring shared by every process: topics, positions, security, producer policy, DLQ.

Creating the topics with their settings, reading partition ends and group commits from
outside, the aiokafka side of Kafka security, the librdkafka producer policy every
producer of jobstream uses, and the dead-letter writer.

May import: ``pipeline.core``, ``pipeline.codecs``, ``pipeline.runtime``. Not edges,
agents, sink, dashboards or tooling.
"""
