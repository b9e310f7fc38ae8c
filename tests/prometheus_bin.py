"""The Prometheus and promtool the project's set-up builds into the stack cache
(``jobstream stack fetch prometheus``, which ``./run test`` runs): the calling test skips
when they are not built, and fails under ``CI=true``, where ``./run`` builds them. A test's
own Prometheus runs from here too."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from datafiles import unavailable
from waiting import wait_until

from pipeline.runtime.children import free_port
from pipeline.runtime.config import load_config
from pipeline.tooling.stack.prometheus import PrometheusService

__all__ = ["prometheus_binaries", "running_prometheus"]


def prometheus_binaries() -> tuple[Path, Path]:
    """(prometheus, promtool) of the configured stack cache."""
    service = PrometheusService(load_config(), [])
    if not service.installed():
        unavailable(f"Prometheus is not built in {service.bin_dir} "
                    "(jobstream stack fetch prometheus)",
                    f"Prometheus is not built in {service.bin_dir}: under CI ./run builds it "
                    "(jobstream stack fetch prometheus)")
    return service.prometheus, service.promtool


@contextmanager
def running_prometheus(root: Path, conf: dict[str, Any]) -> Iterator[str]:
    """A Prometheus of the stack cache's build on ``conf`` (a ``prometheus.yml`` as a dict),
    its data and log under ``root``, on a free loopback port: its URL once it is ready.
    Stopped afterwards."""
    binary, _ = prometheus_binaries()
    root.mkdir(parents=True, exist_ok=True)
    (root / "prometheus.yml").write_text(json.dumps(conf))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = root / "prometheus.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(binary), f"--config.file={root / 'prometheus.yml'}",
             f"--storage.tsdb.path={root / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: proc.poll() is not None or _ready(url), timeout=60,
                   what="Prometheus to be ready")
        assert proc.poll() is None, log_path.read_text()[-3000:]
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:  # noqa: S310 (loopback)
            return bool(resp.status == 200)
    except OSError:
        return False
