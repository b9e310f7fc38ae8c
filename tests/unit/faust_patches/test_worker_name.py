"""Contract of agents.faust_patches.worker_name: mode labels a service's log lines with its
class's name (``Service._repr_name``), so a subclass of Faust's worker logs under its own
name; with the patch, under Faust's."""

from __future__ import annotations

import faust
from mode import Service

from agents.faust_patches import Worker


class Runner(faust.Worker):
    pass


class Named(Worker):
    pass


def test_mode_labels_a_service_with_its_class_name() -> None:
    class Fetching(Service):
        pass

    service = Fetching()
    assert service.shortlabel == service.label == service._repr_name() == "Fetching"
    assert service._format_log(0, "starting").startswith("[^Fetching]")


def test_a_subclass_of_fausts_worker_logs_under_its_own_name_and_here_as_fausts() -> None:
    app = faust.App("worker-name", autodiscover=False)
    assert faust.Worker(app, quiet=True).shortlabel == "Worker"
    assert Runner(app, quiet=True).shortlabel == "Runner"
    assert Named(app, quiet=True).shortlabel == "Worker"
