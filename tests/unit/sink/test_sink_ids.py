"""Document ids within Elasticsearch's 512-byte ``_id`` limit, whatever the names say.

Elasticsearch refuses a whole bulk request (``action_request_validation_exception``) when
one of its ids is over 512 bytes of UTF-8: a cluster or queue name of a few hundred
characters once stopped the sink for good. Ids that fit stay what they always were (the
documents already written keep theirs); longer ones become a readable prefix and a hash.
"""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.sink.converter import MAX_ID_BYTES, Converter, bounded_id, job_doc_id

NOV_2026 = 1_794_000_000_000

conv = Converter(prefix="t-", generation="v1")


def job(cluster: str = "c1", job_id: str = "42", **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"cluster": cluster, "scheduler": "slurm", "job_id": job_id,
                           "t_submit": NOV_2026, "revision": 1, "updated_at": NOV_2026}
    doc.update(extra)
    return doc


def snapshot(cluster: str = "c1", queue: str = "batch", **extra: Any) -> dict[str, Any]:
    snap: dict[str, Any] = {"cluster": cluster, "queue": queue, "worker": "w1",
                            "timestamp": NOV_2026, "pending_jobs": 1}
    snap.update(extra)
    return snap


def event(event_id: str) -> dict[str, Any]:
    return {"cluster": "c1", "scheduler": "flux", "job_id": "9", "event": "submit",
            "timestamp": NOV_2026 / 1000, "source": "s", "event_id": event_id, "seq": 0,
            "context": "{}", "facts": "{}"}


def nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


def test_a_1000_character_cluster_name_gives_a_job_id_within_the_limit() -> None:
    a = conv.job(job(cluster="c" * 1000))
    assert nbytes(a.doc_id) <= MAX_ID_BYTES
    assert a.doc_id.startswith("c" * 100)  # readable: the id still says whose it is


def test_a_1000_character_queue_name_gives_a_snapshot_id_within_the_limit() -> None:
    a = conv.snapshot(snapshot(cluster="c" * 1000, queue="q" * 1000))
    assert nbytes(a.doc_id) <= MAX_ID_BYTES


def test_bytes_count_not_characters() -> None:
    # 200 characters of 4 bytes each: 800 bytes, far over the limit
    a = conv.snapshot(snapshot(queue="\U0001f600" * 200))
    assert nbytes(a.doc_id) <= MAX_ID_BYTES
    assert len(a.doc_id) < 200


def test_a_foreign_event_id_is_bounded_too() -> None:
    assert nbytes(conv.event(event("e" * 5000)).doc_id) <= MAX_ID_BYTES


def test_ids_that_fit_stay_as_they_were() -> None:
    assert conv.job(job()).doc_id == "c1:42"
    assert conv.job(job(incarnation=1)).doc_id == f"c1:42@{NOV_2026}"
    assert conv.snapshot(snapshot()).doc_id == f"c1:batch:w1:{NOV_2026}"
    exactly = "x" * (MAX_ID_BYTES - 3)
    assert conv.job(job(cluster=exactly, job_id="1")).doc_id == f"{exactly}:1"  # 512 bytes


def test_one_byte_over_is_hashed_and_the_same_every_time() -> None:
    over = "x" * (MAX_ID_BYTES - 1)  # "<over>:1" is 513 bytes
    first = conv.job(job(cluster=over, job_id="1")).doc_id
    assert first != f"{over}:1" and nbytes(first) <= MAX_ID_BYTES
    assert conv.job(job(cluster=over, job_id="1")).doc_id == first
    assert conv.job(job(cluster=over, job_id="2")).doc_id != first


def test_job_doc_id_is_the_bounded_fold_id() -> None:
    assert job_doc_id(job()) == "c1:42"
    assert nbytes(job_doc_id(job(cluster="é" * 400))) <= MAX_ID_BYTES


def test_a_prefix_is_never_cut_inside_a_character() -> None:
    for pad in range(4):
        text = "a" * pad + "\U0001f600" * 300
        bounded = bounded_id(text)
        bounded.encode("utf-8")  # no half character
        assert nbytes(bounded) <= MAX_ID_BYTES


@pytest.mark.parametrize("text", ["", "a", "c1:42"])
def test_short_ids_are_untouched(text: str) -> None:
    assert bounded_id(text) == text
