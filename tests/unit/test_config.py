"""Configuration: TOML, environment overrides, secrets, librdkafka properties files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.runtime.config import Config, Secret, load_config, read_properties
from pipeline.runtime.errors import ConfigError

TOML = """
cluster = "tioga"

[kafka]
bootstrap = "broker1:9092,broker2:9092"

[topics]
raw = "site.jobs.raw"

[elasticsearch]
url = "https://es.example:9200"
username = "jobstream"
password = "s3cret-pw"

[stack]
kafka_port = 19092
"""


@pytest.fixture
def toml_file(tmp_path: Path) -> Path:
    path = tmp_path / "jobstream.toml"
    path.write_text(TOML)
    return path


def test_defaults_without_a_file() -> None:
    cfg = load_config("", environ={})
    assert cfg == Config()
    assert (cfg.kafka.bootstrap, cfg.topics.raw, cfg.topics.state) == (
        "127.0.0.1:9092", "hpc.jobs.raw", "hpc.jobs.state")
    assert cfg.source == ""


def test_toml_values_and_untouched_defaults(toml_file: Path) -> None:
    cfg = load_config(str(toml_file), environ={})
    assert cfg.cluster == "tioga"
    assert cfg.kafka.bootstrap == "broker1:9092,broker2:9092"
    assert cfg.topics.raw == "site.jobs.raw"
    assert cfg.topics.events == "hpc.jobs.events"
    assert cfg.stack.kafka_port == 19092
    assert cfg.source == str(toml_file)


def test_environment_overrides_the_file_and_is_coerced(toml_file: Path) -> None:
    env = {"JOBSTREAM_KAFKA__BOOTSTRAP": "envbroker:9092", "JOBSTREAM_STACK__KAFKA_PORT": "29092",
           "JOBSTREAM_CLUSTER": "ruby", "UNRELATED": "x"}
    cfg = load_config(str(toml_file), environ=env)
    assert cfg.kafka.bootstrap == "envbroker:9092"
    assert cfg.stack.kafka_port == 29092
    assert cfg.cluster == "ruby"
    assert cfg.topics.raw == "site.jobs.raw"


def test_config_path_from_environment(toml_file: Path) -> None:
    cfg = load_config(None, environ={"JOBSTREAM_CONFIG": str(toml_file)})
    assert cfg.cluster == "tioga"


@pytest.mark.parametrize("env, key", [
    ({"JOBSTREAM_STACK__KAFKA_PORT": "ninety"}, "stack.kafka_port"),
    ({"JOBSTREAM_KAFKA__NO_SUCH_KEY": "1"}, "kafka.no_such_key"),
])
def test_bad_values_name_the_key(env: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config("", environ=env)


def test_invalid_toml_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[kafka\nbootstrap=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(str(bad), environ={})


def test_secret_never_shows_itself(toml_file: Path) -> None:
    cfg = load_config(str(toml_file), environ={})
    assert isinstance(cfg.elasticsearch.password, Secret)
    assert "s3cret-pw" not in repr(cfg)
    assert cfg.elasticsearch.password.reveal() == "s3cret-pw"
    assert cfg.masked()["elasticsearch"]["password"] == "****"


def test_config_show_masks_secrets(toml_file: Path) -> None:
    result = CliRunner().invoke(main, ["--config", str(toml_file), "config", "show"],
                                env={"JOBSTREAM_ELASTICSEARCH__USERNAME": "from-env"})
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert "s3cret-pw" not in result.output
    assert shown["elasticsearch"]["password"] == "****"
    assert shown["elasticsearch"]["username"] == "from-env"
    assert shown["kafka"]["bootstrap"] == "broker1:9092,broker2:9092"


def test_config_show_reports_a_broken_file_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[kafka]\npartitions = 'many'\n")
    result = CliRunner().invoke(main, ["--config", str(bad), "config", "show"])
    assert result.exit_code == ConfigError.exit_code
    assert "kafka.partitions" in result.output
    assert "Traceback" not in result.output


def test_replace_returns_a_new_tree(toml_file: Path) -> None:
    cfg = load_config(str(toml_file), environ={})
    other = cfg.replace(topics={"raw": "t.1"}, elasticsearch={"index_prefix": "p-"})
    assert (other.topics.raw, other.topics.events) == ("t.1", "hpc.jobs.events")
    assert other.elasticsearch.index_prefix == "p-"
    assert other.elasticsearch.password.reveal() == "s3cret-pw"
    assert cfg.topics.raw == "site.jobs.raw"


def test_read_properties(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("# librdkafka\n! also a comment\n\nsecurity.protocol = SASL_SSL\n"
                     "sasl.jaas.config=a=b;c=d\n")
    assert read_properties(str(props)) == {"security.protocol": "SASL_SSL",
                                           "sasl.jaas.config": "a=b;c=d"}


def test_read_properties_errors_name_the_line(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("acks=all\nnot a property\n")
    with pytest.raises(ConfigError, match=r"client\.properties:2"):
        read_properties(str(props))
    with pytest.raises(ConfigError, match="cannot read"):
        read_properties(str(tmp_path / "missing.properties"))


def test_librdkafka_passes_the_file_through_then_extras(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("bootstrap.servers=fromfile:9092\nlinger.ms=50\n")
    cfg = load_config("", environ={"JOBSTREAM_KAFKA__PROPERTIES_FILE": str(props)})
    assert cfg.librdkafka(**{"linger.ms": 5, "group.id": "g"}) == {
        "bootstrap.servers": "fromfile:9092", "linger.ms": 5, "group.id": "g"}
