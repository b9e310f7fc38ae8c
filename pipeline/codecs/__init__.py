"""The codecs: Avro schemas, Avro bodies compiled from them, and the wire framing.

What a record on one of jobstream's topics is made of (Confluent or Apicurio framing,
the schemas under ``schemas/``), and what the worker puts on and takes off Kafka.

May import: ``pipeline.core``, ``pipeline.runtime``. Not Kafka clients (the schema registry
client that ships inside confluent-kafka excepted), edges, agents, sink or dashboards.
"""
