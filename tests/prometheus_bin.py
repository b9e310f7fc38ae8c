"""The Prometheus and promtool the project's set-up builds into the stack cache
(``jobstream stack fetch prometheus``, which ``./run test`` runs): the calling test skips
when they are not built, and fails under ``CI=true``, where ``./run`` builds them."""

from __future__ import annotations

from pathlib import Path

from datafiles import unavailable

from pipeline.runtime.config import load_config
from pipeline.tooling.stack.prometheus import PrometheusService

__all__ = ["prometheus_binaries"]


def prometheus_binaries() -> tuple[Path, Path]:
    """(prometheus, promtool) of the configured stack cache."""
    service = PrometheusService(load_config(), [])
    if not service.installed():
        unavailable(f"Prometheus is not built in {service.bin_dir} "
                    "(jobstream stack fetch prometheus)",
                    f"Prometheus is not built in {service.bin_dir}: under CI ./run builds it "
                    "(jobstream stack fetch prometheus)")
    return service.prometheus, service.promtool
