import json

import pytest

from pipeline.core.anonymize import Anonymizer, strip_private
from pipeline.runtime.errors import ConfigError

KEY = b"0123456789abcdef-site-key"


def event(**over):
    base = {
        "cluster": "c", "scheduler": "slurm", "job_id": "7", "event": "end",
        "timestamp": 1.0, "source": "slurm-jobcomp", "event_id": "x", "seq": None,
        "context": {"SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1001",
                    "SLURM_JOB_WORK_DIR": "/home/alice/run", "status": 0},
        "facts": {"user": "alice", "uid": 1001, "group": "physics-g", "cwd": "/home/alice/run",
                  "nnodes": 2},
        "jobspec": {"attributes": {"system": {"cwd": "/home/alice/run",
                                              "environment": {"HOME": "/home/alice"}}}},
        "record": {"username": "alice", "script": "#!/bin/sh\necho secret"},
    }
    base.update(over)
    return base


class TestStripPrivate:
    def test_scripts_and_environment_always_go(self):
        out = Anonymizer({}).event(event())
        assert "environment" not in out["jobspec"]["attributes"]["system"]
        assert "script" not in out["record"]
        assert out["facts"]["user"] == "alice"  # policy off: identities kept

    def test_input_is_not_modified(self):
        ev = event()
        strip_private(ev)
        assert "environment" in event()["jobspec"]["attributes"]["system"]


class TestPolicy:
    def test_no_identity_left_anywhere(self):
        anon = Anonymizer({"user": "pseudonymize", "uid": "pseudonymize", "group": "drop",
                           "cwd": "pseudonymize"}, KEY)
        text = json.dumps(anon.event(event())) + json.dumps(anon.document(event()["facts"]))
        for secret in ("alice", "1001", "physics-g", "/home"):
            assert secret not in text

    def test_pseudonyms_are_stable_and_keyed(self):
        a = Anonymizer({"user": "pseudonymize"}, KEY)
        b = Anonymizer({"user": "pseudonymize"}, KEY)
        c = Anonymizer({"user": "pseudonymize"}, b"another-key-of-16-bytes")
        assert a.document({"user": "alice"}) == b.document({"user": "alice"})
        assert a.document({"user": "alice"}) != c.document({"user": "alice"})
        assert a.document({"user": "alice"})["user"] != "alice"

    def test_uid_pseudonym_stays_an_int(self):
        doc = Anonymizer({"uid": "pseudonymize"}, KEY).document({"uid": 1001})
        assert isinstance(doc["uid"], int) and doc["uid"] != 1001

    def test_user_annotations_are_scrubbed_like_contexts(self):
        # Flux memos are the job's users' free text: a name there is replaced like one in a
        # context, a key naming an identity gets that identity's policy
        anon = Anonymizer({"user": "pseudonymize"}, KEY)
        doc = anon.document({"user": "alice", "user_annotations": {
            "note": "ran by alice in /home/alice", "user": "alice", "progress": "50"}})
        notes = doc["user_annotations"]
        assert "alice" not in json.dumps(notes)
        assert notes["note"] == f"ran by {doc['user']} in /home/{doc['user']}"
        assert notes["user"] == doc["user"] and notes["progress"] == "50"

    def test_drop_removes_the_field(self):
        assert "group" not in Anonymizer({"group": "drop"}).document({"group": "g", "a": 1})

    def test_numbers_outside_id_keys_survive(self):
        out = Anonymizer({"uid": "pseudonymize"}, KEY).event(event())
        assert out["context"]["status"] == 0

    @pytest.mark.parametrize("policy", [{"shoe": "drop"}, {"user": "hide"}])
    def test_bad_policy_is_a_config_error(self, policy):
        with pytest.raises(ConfigError):
            Anonymizer(policy, KEY)

    def test_pseudonymize_needs_a_key(self):
        with pytest.raises(ConfigError, match="key_file"):
            Anonymizer({"user": "pseudonymize"})

    def test_short_key_file_refused(self, tmp_path):
        f = tmp_path / "key"
        f.write_bytes(b"short")
        with pytest.raises(ConfigError, match="16 bytes"):
            Anonymizer.from_config({"user": "pseudonymize"}, str(f))


class TestContext:
    POLICY = {"user": "pseudonymize", "uid": "pseudonymize", "cwd": "drop"}

    def test_an_id_key_gets_the_policy_whoever_it_names(self):
        # a Flux cancel: the context says who raised it; the event's facts say nothing
        anon = Anonymizer(self.POLICY, KEY)
        out = anon.event(event(facts={}, context={"type": "cancel", "userid": 1002,
                                                  "SLURM_JOB_UID": "1001",
                                                  "SLURM_JOB_WORK_DIR": "/home/bob/x"}))
        assert out["context"]["userid"] == anon.pseudonym("uid", 1002)
        assert out["context"]["SLURM_JOB_UID"] == str(anon.pseudonym("uid", 1001))
        assert "SLURM_JOB_WORK_DIR" not in out["context"]
        assert out["context"]["type"] == "cancel"

    def test_free_text_loses_the_jobs_identities(self):
        anon = Anonymizer(self.POLICY, KEY)
        ev = event(facts={}, context={"note": "cancelled by alice in /home/alice/run"})
        known = [("user", "alice"), ("uid", 1001), ("cwd", "/home/alice/run"), ("user", "alice")]
        note = anon.event(ev, known)["context"]["note"]
        assert "alice" not in note and "/home" not in note
        assert anon.pseudonym("user", "alice") in note
        assert anon.event(ev)["context"]["note"] == ev["context"]["note"]  # without the job

    def test_unknown_identity_stays_unknown(self):
        doc = Anonymizer(self.POLICY, KEY).document({"user": None, "uid": None, "cwd": None})
        assert doc == {"user": None, "uid": None, "cwd": None}
