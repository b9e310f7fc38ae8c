"""Replay: the raw topic reprocessed into a new index generation, then the aliases swapped.

May import: ``pipeline.sink``, ``pipeline.kafka`` and everything below them. Not the
agents (the workers it runs are child processes) nor the tooling.
"""
