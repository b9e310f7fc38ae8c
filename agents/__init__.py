"""The Faust app of jobstream and its agents, tables and timers (run by ``jobstream worker``).

May import: ``pipeline.kafka``, ``pipeline.codecs``, ``pipeline.fold``, ``pipeline.parsers``,
``pipeline.core``, ``pipeline.runtime``. Not the edges, the sink, the dashboards or the
tooling; of ``pipeline`` only the command line and the tooling import it.
"""
