"""jobstream: everything that is not a Faust agent (model, parsers, codecs, edges, sink, CLI)."""

__version__ = "0.1.0"
