"""The waits between attempts of the edges and the sink."""

from __future__ import annotations

import random

from pipeline.runtime.backoff import Backoff


def test_doubles_up_to_the_maximum_and_starts_again_after_a_reset() -> None:
    b = Backoff(1.0, 10.0)
    assert [b.next() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    b.reset()
    assert b.next() == 1.0


def test_full_jitter_within_the_exponential_bound() -> None:
    rng = random.Random(1)
    for failures in range(12):
        bound = min(8.0, 0.5 * 2 ** failures)
        delays = []
        for _ in range(200):
            b = Backoff(0.5, 8.0, jitter=True, rng=rng)
            b.failures = failures
            delays.append(b.next())
        assert all(0.0 <= d <= bound for d in delays)
        # jitter spreads the waits over the whole range, not near the bound only
        assert min(delays) < bound / 4 and max(delays) > bound * 3 / 4


def test_a_long_outage_stays_bounded() -> None:
    b = Backoff(0.5, 5.0, jitter=True, rng=random.Random(0))
    assert max(b.next() for _ in range(10_000)) <= 5.0
