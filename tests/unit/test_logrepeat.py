"""The filter that holds back aiokafka's repeated messages (pipeline.runtime.logrepeat)."""

from __future__ import annotations

import logging

from pipeline.runtime.logrepeat import RepeatFilter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def record(name: str, msg: str, *args: object, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_first_passes_repeats_are_held_and_counted() -> None:
    clock = Clock()
    f = RepeatFilter(window_s=30.0, clock=clock)
    assert f.filter(record("aiokafka.client", "Unable connect to node with id %s: %s", 1, "x"))
    # same message, other arguments: held back
    for i in range(500):
        clock.now += 0.01
        assert not f.filter(record("aiokafka.client", "Unable connect to node with id %s: %s",
                                   1, f"err {i}"))
    clock.now = 131.0
    again = record("aiokafka.client", "Unable connect to node with id %s: %s", 1, "y")
    assert f.filter(again)
    assert again.getMessage() == "Unable connect to node with id 1: y [500 more like this in 31 s]"
    # the window starts afresh from the one shown
    clock.now += 1
    assert not f.filter(record("aiokafka.client", "Unable connect to node with id %s: %s", 1, "z"))


def test_distinct_messages_levels_and_loggers_are_apart() -> None:
    f = RepeatFilter(clock=Clock())
    assert f.filter(record("aiokafka.client", "Unable to update metadata from %s", [1]))
    assert f.filter(record("aiokafka.client", "Unable connect to node with id %s", 1))
    assert f.filter(record("aiokafka.client", "Unable connect to node with id %s", 1,
                           level=logging.WARNING))
    assert f.filter(record("aiokafka.conn", "Unable connect to node with id %s", 1))


def test_other_loggers_pass_untouched() -> None:
    f = RepeatFilter(clock=Clock())
    for _ in range(3):
        assert f.filter(record("agents.watchdog", "partition %s is stuck", "raw[1]"))
