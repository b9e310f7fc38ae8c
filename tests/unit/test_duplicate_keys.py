"""Duplicate keys in a source record's JSON are refused (``duplicate-key``), wherever the
object is and however the text is spaced; text that only looks like extra keys is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.parsers import parse_record
from pipeline.parsers.duplicates import check_duplicate_keys
from pipeline.runtime.errors import ParseError

SUBMIT = ('{"timestamp":1780000000.0,"name":"submit",'
          '"context":{"userid":1001,"urgency":16,"flags":0,"version":1}}')
JOBCOMP = (Path(__file__).parents[1] / "data" / "slurm" / "jobcomp_epoch_times.json").read_text()


def reason(fmt: str, text: str) -> str:
    with pytest.raises(ParseError) as info:
        parse_record(fmt, text.encode(), cluster="c")
    return info.value.reason


@pytest.mark.parametrize("text", [
    '{"id":5,"id":6,"events":[' + SUBMIT + ']}',  # the job id twice
    '{"id":5,"events":[' + SUBMIT.replace('"flags":0', '"flags":0,"flags":0') + ']}',  # nested
    '{"id" : 5, "events" : [' + SUBMIT + '], "id" : 5}',  # spaced, same value twice
    # a key spaced from its colon is not counted by '":', so the repeat balanced the count
    '{"id" :5,"id":6,"events":[' + SUBMIT + ']}',
    '{ "id"\n: 5, "id": 6, "events": [' + SUBMIT + ']}',
    '{"id":5,"id"\t\r\n :6,"events":[' + SUBMIT + ']}',
    '{"id":5,"events":[' + SUBMIT.replace('"flags":0', '"flags" :0,"flags":0') + ']}',  # nested
    '{"id":5,"events":[' + SUBMIT.replace('"flags":0', '"flags"\n:0,"flags":1') + ']}',
])
def test_flux_records_repeating_a_key_are_refused(text: str) -> None:
    assert reason("flux-journal", text) == "duplicate-key"


def test_a_slurm_record_repeating_a_key_is_refused() -> None:
    doc = JOBCOMP.rstrip().rstrip("}") + ', "jobid": 99}'
    assert reason("slurm-jobcomp", doc) == "duplicate-key"


def test_text_that_only_looks_like_more_keys_is_accepted() -> None:
    memo = '{"timestamp":1780000001.0,"name":"memo","context":{"note":"a\\":b\\":c"}}'
    [_, ev] = parse_record("flux-journal", ('{"id":5,"events":[' + SUBMIT + "," + memo + "]}")
                           .encode(), cluster="c")
    assert ev.context == {"note": 'a":b":c'}


@pytest.mark.parametrize("text", [
    '{"a" :1,"a":2}', '{ "a"\n: 1, "a": 2}', '{"a":1, "a" :2}', '{"a"\t:1,"a"\r:2}',
    '[{"a":1}, {"b": {"c" :1, "c":2}}]',
    '{"x":"y\\":", "a" :1, "a":2}',  # a '":' inside a string, as well
])
def test_a_key_spaced_from_its_colon_is_checked_too(text: str) -> None:
    with pytest.raises(ParseError, match="'[ac]'"):
        check_duplicate_keys(text, json.loads(text), "x")


@pytest.mark.parametrize("text", [
    '{"a" :1,"b":2}', '{"a":"b :","c":1}', '{"a":"x\\n:","b" : {"c" :1}}',
])
def test_spaced_keys_and_colons_without_a_repeat_pass(text: str) -> None:
    check_duplicate_keys(text, json.loads(text), "x")


def test_the_check_sees_every_object() -> None:
    value = {"a": [{"b": 1}, {"c": {"d": 2}}]}
    check_duplicate_keys(json.dumps(value), value, "x")
    text = '{"a": [{"b": 1}, {"c": {"d": 2, "d": 3}}]}'
    with pytest.raises(ParseError, match="'d'"):
        check_duplicate_keys(text, json.loads(text), "x")
