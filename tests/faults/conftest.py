"""Fixtures of the fault-injection suite: one private stack per session (a one-broker
Kafka, and a three-broker one only when a cluster scenario is selected), a Flow per
scenario, and the table of results (printed at the end of the session and written to
``<pytest basetemp>/faults.md`` and ``.json``, or to ``$FAULTS_REPORT`` when set)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from datafiles import unavailable
from harness import RESULTS, Flow, all_in_sync, private_stack, wait_until, write_table

from pipeline.runtime.config import Config
from pipeline.runtime.errors import ServiceError
from pipeline.tooling.stack import kafka_nodes, start_broker
from pipeline.tooling.workload import WorkloadSpec

_FAULTS_DIR = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _FAULTS_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.faults)


def _stack(base: Config, brokers: int) -> Iterator[Config]:
    gen = private_stack(base, brokers)
    try:
        cfg = next(gen)
    except ServiceError as exc:
        unavailable(f"private stack unavailable: {exc}",
                    f"the private stack must start under CI, but: {exc}")
    yield cfg
    gen.close()


# Module-scoped, not session-scoped: a session's stacks stayed up, idle but not free (two
# Elasticsearch nodes and four brokers), through the rest of the test run after the faults.
@pytest.fixture(scope="module")
def fault_stack(base_config: Config) -> Iterator[Config]:
    """A Kafka and an Elasticsearch of the fault suite alone (free ports, own data), for
    the tests of one module."""
    yield from _stack(base_config, 1)


@pytest.fixture(scope="module")
def cluster_stack(base_config: Config) -> Iterator[Config]:
    """Three Kafka brokers (a KRaft quorum of the three) and an Elasticsearch of the fault
    suite alone; started only when a test that asks for it is selected."""
    yield from _stack(base_config, 3)


def _flows(stack: Config, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """``make(spec, *, name, start, edge_cfg, workers, sinks, metrics)`` -> a started :class:`Flow`
    on ``stack`` named after the test; stopped afterwards (its logs stay in the test's tmp
    dir)."""
    flows: list[Flow] = []

    def make(spec: WorkloadSpec, *, name: str | None = None, start: bool = True,
             edge_cfg: Config | None = None, workers: int = 1, sinks: int = 1,
             metrics: bool = False) -> Flow:
        scenario = name or request.node.name.removeprefix("test_")
        flow = Flow(scenario, stack, tmp_path, spec, workers=workers, sinks=sinks,
                    metrics=metrics)
        flows.append(flow)
        return flow.start(edge_cfg=edge_cfg) if start else flow

    yield make
    for flow in flows:
        flow.close()


@pytest.fixture
def make_flow(fault_stack: Config, tmp_path: Path, request: pytest.FixtureRequest
              ) -> Iterator[Any]:
    """A :class:`Flow` on the one-broker stack (see :func:`_flows`)."""
    yield from _flows(fault_stack, tmp_path, request)


@pytest.fixture
def make_cluster_flow(cluster_stack: Config, tmp_path: Path, request: pytest.FixtureRequest
                      ) -> Iterator[Any]:
    """A :class:`Flow` on the three-broker stack (see :func:`_flows`), with every broker
    up and every replica in sync first: a scenario that failed half-way through an outage
    must not leave the next one a broker short."""
    for node in kafka_nodes(cluster_stack):
        start_broker(cluster_stack, node)
    wait_until("every replica of the cluster in sync", lambda: all_in_sync(cluster_stack))
    yield from _flows(cluster_stack, tmp_path, request)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if not RESULTS:
        return
    target = os.environ.get("FAULTS_REPORT")
    path = Path(target) if target else Path(str(config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined]
                                            ) / "faults.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    table = write_table(RESULTS, path)
    terminalreporter.write_sep("=", "fault-injection results")
    terminalreporter.write(table)
    terminalreporter.write_line(f"(written to {path} and {path.with_suffix('.json')})")
