"""The DLQ's one header vocabulary and its one cap (pipeline.kafka.dlq)."""

from __future__ import annotations

import hashlib

from pipeline.kafka.dlq import MAX_HEADER_BYTES, dlq_headers, dropped, header_text, origin


def test_the_headers_say_why_and_where() -> None:
    headers = dict(dlq_headers("bad-json", "publish", "no", {"origin": origin("t", 2, 41),
                                                             "part": 3}))
    assert headers == {"reason": b"bad-json", "stage": b"publish", "error": b"no",
                       "origin": b"t[2]@41", "part": b"3"}


def test_a_value_is_cut_to_the_cap_in_bytes_between_characters() -> None:
    assert header_text("x" * 10_000) == "x" * MAX_HEADER_BYTES
    cut = header_text("é" * 10_000).encode()
    assert len(cut) == MAX_HEADER_BYTES and cut.decode() == "é" * (MAX_HEADER_BYTES // 2)
    odd = header_text("a" + "€" * 10_000).encode()  # 3 bytes each: the last one does not fit
    assert len(odd) <= MAX_HEADER_BYTES and odd.decode().endswith("€")
    assert header_text("short é") == "short é"


def test_a_lone_surrogate_is_escaped_not_raised() -> None:
    assert header_text("ab\ud83d") == "ab\\ud83d"
    [(_, error)] = [h for h in dlq_headers("r", "sink", "ab\ud83d") if h[0] == "error"]
    assert error == b"ab\\ud83d"


def test_a_dropped_part_is_named_with_its_size_and_hash() -> None:
    first = dropped("value", b"v" * 10, "too large")
    assert first == {"value_bytes": "10", "value_sha256": hashlib.sha256(b"v" * 10).hexdigest(),
                     "dropped": "value: too large"}
    assert dropped("key", "k", "still", first["dropped"])["dropped"] == \
        "value: too large; key: still"
