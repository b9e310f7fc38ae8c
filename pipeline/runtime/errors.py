"""All of jobstream's exceptions, under one root so the CLI can turn them into exit codes."""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "JobstreamError",
    "ParseError",
    "Refusal",
    "ServiceError",
    "SinkError",
    "SpoolError",
]


class JobstreamError(Exception):
    """Root of every error jobstream raises on purpose; the CLI prints it without a traceback."""

    exit_code = 1


class ConfigError(JobstreamError):
    """The configuration is invalid; the message names the key to change."""

    exit_code = 78  # EX_CONFIG


class ServiceError(JobstreamError):
    """A service (Kafka, Elasticsearch, Java, mvn) is missing, unreachable or failed to start."""

    exit_code = 69  # EX_UNAVAILABLE


class Refusal(JobstreamError):
    """A record refused for what it holds, the shape every stage's refusal has so that any
    of them can become a DLQ record (:func:`pipeline.kafka.dlq.dlq_headers`).

    ``reason`` is a short, stable, machine-readable word (it becomes the DLQ ``reason``
    header); ``message`` says what is wrong in words a person can act on.
    """

    exit_code = 65  # EX_DATAERR

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class ParseError(Refusal):
    """A source record cannot be turned into canonical events."""


class SinkError(JobstreamError):
    """Elasticsearch refused or failed a write in a way retrying will not fix."""


class SpoolError(JobstreamError):
    """The local spool cannot accept a record (disk full, corrupt)."""

    exit_code = 74  # EX_IOERR
