import pytest

from pipeline.core.enrich import Enricher


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_passwd_and_group_files(tmp_path):
    passwd = write(tmp_path, "passwd", "alice:x:1001:2001:Alice:/home/alice:/bin/sh\n")
    write(tmp_path, "group", "physics:x:2001:\n")
    e = Enricher.from_config(passwd_file=passwd, use_host_db=False)
    assert e.facts({"uid": 1001}) == {"uid": 1001, "user": "alice", "group": "physics"}


def test_toml_map_gives_default_bank_but_never_overrides(tmp_path):
    users = write(tmp_path, "users.toml", '[users.1001]\nname = "alice"\nbank = "chem"\n')
    e = Enricher.from_config(users_file=users, use_host_db=False)
    assert e.facts({"uid": 1001})["bank"] == "chem"
    assert e.facts({"uid": 1001, "bank": "physics", "user": "a2"})["bank"] == "physics"
    assert e.facts({"uid": 1001, "user": "a2"})["user"] == "a2"


def test_missing_data_is_not_an_error(tmp_path):
    e = Enricher.from_config(use_host_db=False)
    assert e.facts({"uid": 4242}) == {"uid": 4242}
    assert e.facts({}) == {}


def test_host_database_fallback():
    # uid 0 is root on every host this runs on
    assert Enricher().facts({"uid": 0})["user"] == "root"


def test_topology(tmp_path):
    topo = write(tmp_path, "topo.toml",
                 '[nodes.n1]\nrack = "r1"\ntype = "gpu"\n[nodes.n2]\nrack = "r2"\n')
    e = Enricher.from_config(topology_file=topo, use_host_db=False)
    out = e.facts({"nodelist": ["n1", "n2", "n3"]})
    assert out["racks"] == ["r1", "r2"] and out["node_types"] == ["gpu"]


def test_a_new_stage_sees_users_the_host_gained_since_an_older_one_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The host's answers are remembered per stage, not per process: a test (or a replay)
    # that builds its stage after a user was created must see that user, as a freshly
    # started worker does.
    import pwd
    known: dict[int, pwd.struct_passwd] = {}

    def getpwuid(uid: int) -> pwd.struct_passwd:
        return known[uid]

    monkeypatch.setattr(pwd, "getpwuid", getpwuid)
    before = Enricher()
    assert before.facts({"uid": 4242}) == {"uid": 4242}
    known[4242] = pwd.struct_passwd(("newbie", "x", 4242, 4242, "", "/home/newbie", "/bin/sh"))
    assert before.facts({"uid": 4242}) == {"uid": 4242}  # remembered for this stage's life
    assert Enricher().facts({"uid": 4242})["user"] == "newbie"
