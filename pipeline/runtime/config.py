"""Configuration: one frozen tree, loaded once from TOML, then environment overrides.

The file is ``jobstream.toml`` (path from ``--config`` or ``JOBSTREAM_CONFIG``; absent is
fine: every key has a default). Any key can be overridden from the environment as
``JOBSTREAM_<SECTION>__<KEY>`` (``JOBSTREAM_CLUSTER`` for the top-level cluster name), e.g.
``JOBSTREAM_KAFKA__BOOTSTRAP=broker1:9092``. Nothing else in jobstream reads ``os.environ``
for settings: the tree is passed down.

librdkafka properties are not configuration of ours: ``kafka.properties_file`` names a
Java-style properties file whose keys go to every confluent-kafka client untouched, as
Slurm's ``JobCompLoc`` file does for jobcomp/kafka.

The module is long because it is the whole configuration tree, one frozen dataclass per
section with every key's default and meaning beside it; the loader follows the tree.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.runtime.errors import ConfigError

__all__ = ["Config", "Secret", "load_config", "read_properties"]

ENV_PREFIX = "JOBSTREAM_"


class Secret(str):
    """A string that never shows itself in ``repr``, logs or ``config show``."""

    def __repr__(self) -> str:
        return "Secret('****')" if self else "Secret('')"

    def reveal(self) -> str:
        return str.__str__(self)


def _default_cache_dir() -> str:
    if os.environ.get("XDG_CACHE_HOME"):
        return str(Path(os.environ["XDG_CACHE_HOME"]) / "jobstream")
    if os.geteuid() == 0:
        # root's home is private, and the stack's Elasticsearch runs as another user
        return "/var/cache/jobstream"
    return str(Path.home() / ".cache" / "jobstream")


@dataclass(frozen=True)
class KafkaConfig:
    #: bootstrap servers, comma separated
    bootstrap: str = "127.0.0.1:9092"
    #: librdkafka properties file (key=value lines), passed through as-is
    properties_file: str = ""
    #: Confluent-compatible schema registry URL; empty = Avro single-object encoding
    schema_registry_url: str = ""
    #: partitions of the topics jobstream creates
    partitions: int = 4
    #: replicas of every topic jobstream creates (its own and Faust's internal and
    #: changelog topics); 0 = the cluster's ``default.replication.factor``
    replication_factor: int = 0
    #: ``min.insync.replicas`` of every topic jobstream creates; 0 = the cluster's default
    min_insync_replicas: int = 0


@dataclass(frozen=True)
class TopicsConfig:
    raw: str = "hpc.jobs.raw"
    events: str = "hpc.jobs.events"
    state: str = "hpc.jobs.state"
    #: one NodeState document per (cluster, node), compacted like the job states
    nodes: str = "hpc.nodes.state"
    #: every node event folded, keyed cluster:node, beside the job events
    node_events: str = "hpc.nodes.events"
    snapshots: str = "hpc.queue.snapshots"
    dlq: str = "hpc.jobs.dlq"


@dataclass(frozen=True)
class ElasticsearchConfig:
    url: str = "http://127.0.0.1:9200"
    username: str = ""
    password: Secret = Secret("")
    #: CA bundle for TLS; empty = system default
    ca_certs: str = ""
    #: prefix of every index and alias name (tests give each test its own)
    index_prefix: str = ""


@dataclass(frozen=True)
class StackConfig:
    """The embedded local stack of ``jobstream stack``."""

    cache_dir: str = field(default_factory=_default_cache_dir)
    kafka_version: str = "4.2.1"
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    #: Kafka nodes, each broker and controller; node n (from 1) listens on
    #: ``kafka_port + 2(n-1)`` and ``kafka_controller_port + 2(n-1)`` (9092/9093,
    #: 9094/9095, 9096/9097 by default)
    kafka_brokers: int = 1
    #: empty = newest suitable for the JDK found (9.x on JDK >= 21, else 8.19.x)
    elasticsearch_version: str = ""
    elasticsearch_port: int = 9200
    #: JDK home for Elasticsearch; empty = pick the newest under /usr/lib/jvm
    java_home: str = ""
    #: system user that runs Elasticsearch when jobstream runs as root
    es_user: str = "jobstream-es"
    #: also run a Prometheus (built once with ``go install``) that scrapes the metrics
    #: ports of ``[metrics]`` with jobstream's alert rules (``stack up --prometheus``)
    prometheus: bool = False
    prometheus_port: int = 9090


@dataclass(frozen=True)
class WorkerConfig:
    app_id: str = "jobstream"
    #: RocksDB table store directory; empty = <stack.cache_dir>/worker-store
    store_dir: str = ""
    web_port: int = 6066
    #: address the web endpoint (``/jobs/<cluster>/<job_id>``) listens on; anything but
    #: loopback needs ``web_token_file`` and TLS (``web_tls_cert``, ``web_tls_key``)
    web_bind: str = "127.0.0.1"
    #: host name the other workers reach this one by (table routing); empty = web_bind,
    #: or this host's name when web_bind is a wildcard
    web_host: str = ""
    #: file holding the bearer token every request must carry (mode 0600, the same file on
    #: every worker of the app: routed requests carry it); empty = no token
    web_token_file: str = ""
    #: TLS certificate (chain) and private key (PEM, the key mode 0600) the web endpoint
    #: serves with; both or neither. Beyond loopback they are required, unless
    #: ``web_tls_terminated_by_proxy``. With them, workers advertise and route to https
    web_tls_cert: str = ""
    web_tls_key: str = ""
    #: CA bundle the worker verifies the other workers' certificates with (routed
    #: requests); empty = the system's
    web_tls_ca: str = ""
    #: the operator's statement that a TLS proxy in front of the web endpoint terminates
    #: TLS, so that a bind beyond loopback may serve plain HTTP (routed requests between
    #: workers then go in clear text to the advertised address)
    web_tls_terminated_by_proxy: bool = False
    snapshot_interval_s: float = 30.0
    #: how long a finished job stays in the state table before its tombstone
    done_grace_s: float = 3600.0
    #: Kafka static membership (group.instance.id, unique per worker): a worker restarted
    #: after a crash gets its partitions back at once instead of after the session timeout;
    #: a worker stopped for good holds them until then. Empty = dynamic membership.
    instance_id: str = ""
    #: how long the group waits for a silent worker before giving its partitions away
    session_timeout_s: float = 60.0
    #: how often the worker checks that its input partitions move (agents.watchdog); a
    #: partition whose commit stood still between two checks is read again from it
    stall_check_s: float = 10.0
    #: largest canonical event (JSON bytes) the agents pass on; a bigger one loses its
    #: jobspec / R / record (marked ``<name>_truncated`` in its context). Below the
    #: broker's default max.message.bytes (1 MiB), which the event topics keep.
    max_event_bytes: int = 900_000
    #: largest job state (JSON bytes) the jobs table keeps, one changelog record: a state
    #: over it keeps fewer of each kind of event (pipeline.fold, "Bounds"); one that cannot
    #: fit even so goes to the DLQ, stage ``state``. Well under the changelog's 1 MiB.
    max_state_bytes: int = 512 * 1024
    #: a job's node samples go to the events index (its usage series, the job page's
    #: charts) at most one per this many seconds per node; 0 = every one. The job's
    #: document folds every sample all the same (pipeline.fold.usage.keeps_point)
    usage_series_s: float = 0.0
    #: the worker's fetches from Kafka wait for this many bytes ... (agents.faust_patches.fetch)
    fetch_min_bytes: int = 65536
    #: ... or this long, whichever comes first: the latency it adds, at most
    fetch_max_wait_ms: int = 100


@dataclass(frozen=True)
class AnonymizeConfig:
    #: file holding the site key for HMAC pseudonyms
    key_file: str = ""
    #: field -> keep | pseudonymize | drop
    fields: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EnrichConfig:
    #: passwd-format file for uid -> user, group
    passwd_file: str = ""
    #: TOML map file: [users.<uid>] name, group, bank
    users_file: str = ""
    #: TOML file: [nodes.<host>] rack, type
    topology_file: str = ""


@dataclass(frozen=True)
class SinkConfig:
    #: a batch is written this long after its first record at the latest. With the job
    #: index's 0.5 s refresh this is much of the latency floor; a shorter one writes a job
    #: more often, as fewer of its states fall in one batch (docs/benchmarks-history.md)
    flush_interval_s: float = 0.25
    max_batch: int = 5000
    #: a batch is written as soon as a poll this long brings nothing more (0: only by
    #: ``max_batch`` and ``flush_interval_s``). The worker sends each of its batches
    #: whole, so a quiet moment means what it sent is in hand; a backlog is never quiet
    quiet_s: float = 0.05
    #: how often ``jobstream_consumer_lag`` is computed: from librdkafka's cached ends
    #: normally (no request), from the broker while a flush waits for Elasticsearch (its
    #: paused partitions fetch nothing, so their cached ends stand still)
    lag_interval_s: float = 5.0
    #: the sink's own small state: its crash guard (pipeline.runtime.crashguard), which remembers
    #: what the sink was handling when it died, so that a record that killed it twice is
    #: dead-lettered rather than handled again. Empty = <stack.cache_dir>/sink-state. Under
    #: systemd, a directory the unit may write (its StateDirectory)
    state_dir: str = ""


@dataclass(frozen=True)
class FluxEdgeConfig:
    """``jobstream edge flux``: the job-manager and resource journals of one Flux
    instance."""

    #: Flux URI to connect to; empty = the bindings' default (FLUX_URI, the system instance)
    uri: str = ""
    #: longest wait between reconnect attempts (backoff doubles from 1 s up to this)
    reconnect_max_s: float = 60.0
    #: follow the resource journal (node events: drains, online/offline) beside the jobs
    resource_journal: bool = True


@dataclass(frozen=True)
class SlurmEdgeConfig:
    """``jobstream edge slurm``: each source can be switched off."""

    #: HTTP receiver for jobcomp/elasticsearch (JobCompLoc=http://<host>:<port>/<index>/_doc)
    receiver: bool = True
    receiver_host: str = "127.0.0.1"
    receiver_port: int = 9280
    #: beyond loopback the receiver needs one of these: source networks allowed to post
    #: (comma-separated addresses or CIDRs, e.g. the slurmctld hosts) ...
    receiver_allow: str = ""
    #: ... or HTTP basic credentials, which Slurm sends from JobCompLoc's user:password@
    receiver_user: str = ""
    receiver_password: Secret = Secret("")
    #: bridge from Slurm's own (unkeyed) jobcomp/kafka topics
    bridge: bool = False
    #: the topics jobcomp/kafka writes to (JobCompParams ``topic=`` for finish records,
    #: ``topic_job_start=`` for the start records of ``enable_job_start``); a TOML array,
    #: or comma-separated in the environment. Empty = Slurm's defaults, ``<cluster>`` and
    #: ``<cluster>-job-start``. A topic that does not exist yet is picked up once it does.
    bridge_topics: tuple[str, ...] = ()
    #: deprecated (one topic only): the finish-record topic in place of ``<cluster>``, the
    #: start topic keeping its default; use ``bridge_topics``
    bridge_topic: str = ""
    #: bootstrap servers of Slurm's Kafka; empty = kafka.bootstrap
    bridge_bootstrap: str = ""
    bridge_group: str = "jobstream-jobcomp-bridge"
    #: PrologSlurmctld / EpilogSlurmctld hook listener (unix socket) and drop directory
    hooks: bool = True
    #: empty = <spool_dir>/hook.sock
    hook_socket: str = ""
    #: the user the hooks run as (SlurmUser), given the hook socket and drop directory
    #: (owner-only); empty = the edge's own user, as when the edge runs as SlurmUser
    hook_user: str = ""
    #: empty = <spool_dir>/hook-drop
    hook_drop_dir: str = ""
    hook_scan_s: float = 5.0
    #: lines of jobstream's job_submit.lua and cli_filter.lua (``jobstream edge
    #: install-lua``): a spool directory of append-only files, sticky and writable by all
    #: (cli_filter runs as the submitting user), picked up every submit_scan_s
    submit_plugins: bool = False
    #: empty = <spool_dir>/submit-spool; users must reach it (the unit's StateDirectory
    #: is the edge's alone): e.g. /var/spool/jobstream-submit
    submit_spool_dir: str = ""
    submit_scan_s: float = 1.0
    #: reconciliation poller (squeue and sacct --json)
    poller: bool = True
    poll_interval_s: float = 60.0
    #: never ask sacct for more than this much history after downtime
    catchup_max_s: float = 7 * 86400.0
    #: longest wait between polls while Slurm is unreachable
    poll_backoff_max_s: float = 600.0
    squeue_command: str = "squeue --json"
    #: ended states only: squeue reports the living jobs, and without ``--state`` Slurm
    #: 22.05 leaves jobs that were never eligible (held, dependency) out of the window
    sacct_command: str = "sacct --json --allusers --state CA,CD,F,TO,NF,OOM,PR,BF,DL"
    command_timeout_s: float = 60.0
    #: node state poller (format slurm-nodes): a record per node whose state, reason,
    #: reason_set_by_user, reason_changed_at or partitions changed (docs/slurm.md, "Node
    #: state"); it shares poll_backoff_max_s and command_timeout_s with the job poller
    nodes: bool = True
    nodes_interval_s: float = 60.0
    #: empty = by the Slurm version (``scontrol --version``): ``scontrol show nodes
    #: --json`` from 23.02, ``sinfo --json`` before (22.05 has no scontrol --json)
    nodes_command: str = ""


@dataclass(frozen=True)
class NodeEdgeConfig:
    """``jobstream edge node``: the usage of the jobs on one compute node (docs/node.md)."""

    #: seconds between two samples of every job (Slurm's JobAcctGatherFrequency default)
    interval_s: float = 30.0
    #: the node's name in the samples; empty = the host name up to its first '.'
    name: str = ""
    #: where the cgroup hierarchies are mounted (Slurm's CgroupMountpoint)
    cgroup_root: str = "/sys/fs/cgroup"
    proc_root: str = "/proc"
    #: readers, in precedence order: "cgroup" (the jobs' cgroups), "procs" (the processes
    #: whose environment names a job, for jobs without a cgroup)
    readers: tuple[str, ...] = ("cgroup", "procs")
    #: the schedulers whose jobs are sampled: "slurm", "flux"
    schedulers: tuple[str, ...] = ("slurm", "flux")
    #: NVIDIA GPUs through NVML (off by itself, said once, where there is no driver)
    gpus: bool = True
    #: the process reader sums smaps_rollup's Pss instead of VmRSS (Slurm's UsePss)
    use_pss: bool = False
    #: the slices where Flux's sdexec units are looked for (under the cgroup root)
    flux_slices: tuple[str, ...] = ("user.slice", "system.slice")
    #: Prometheus metrics port, on loopback only; 0 = off
    metrics_port: int = 0


@dataclass(frozen=True)
class EdgeConfig:
    #: durable spool directory; empty = <stack.cache_dir>/spool
    spool_dir: str = ""
    #: refuse new records past this spool size in bytes (0 = until the disk is full)
    spool_max_bytes: int = 0
    flux: FluxEdgeConfig = field(default_factory=FluxEdgeConfig)
    slurm: SlurmEdgeConfig = field(default_factory=SlurmEdgeConfig)
    node: NodeEdgeConfig = field(default_factory=NodeEdgeConfig)


@dataclass(frozen=True)
class MetricsConfig:
    """Prometheus metrics (``pipeline.runtime.metrics``): one port per long-running process.

    0 = off, the default: several workers or sinks on one host (a replay runs its own)
    would clash on any fixed default.
    """

    #: address the metrics ports listen on; anything but loopback needs ``token_file``
    #: and TLS (``tls_cert``, ``tls_key``)
    bind: str = "127.0.0.1"
    #: file holding the bearer token every scrape must carry (mode 0600; Prometheus's
    #: ``authorization.credentials_file``); empty = no token
    token_file: str = ""
    #: TLS certificate (chain) and private key (PEM, the key mode 0600) the ports serve
    #: with; both or neither. Beyond loopback they are required, unless
    #: ``tls_terminated_by_proxy``
    tls_cert: str = ""
    tls_key: str = ""
    #: the operator's statement that a TLS proxy in front of the ports terminates TLS, so
    #: that a bind beyond loopback may serve plain HTTP
    tls_terminated_by_proxy: bool = False
    worker_port: int = 0
    sink_port: int = 0
    edge_flux_port: int = 0
    edge_slurm_port: int = 0
    #: URL of a Prometheus that scrapes these ports: ``dashboards check`` runs the pipeline
    #: dashboard's PromQL panels against it; empty = those panels are left aside
    prometheus_url: str = ""


@dataclass(frozen=True)
class Config:
    cluster: str = "local"
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    topics: TopicsConfig = field(default_factory=TopicsConfig)
    elasticsearch: ElasticsearchConfig = field(default_factory=ElasticsearchConfig)
    stack: StackConfig = field(default_factory=StackConfig)
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    anonymize: AnonymizeConfig = field(default_factory=AnonymizeConfig)
    enrich: EnrichConfig = field(default_factory=EnrichConfig)
    sink: SinkConfig = field(default_factory=SinkConfig)
    edge: EdgeConfig = field(default_factory=EdgeConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    #: where the config was read from ("" = defaults only)
    source: str = ""

    def replace(self, **sections: Any) -> Config:
        """A copy with some values changed: ``cfg.replace(topics={"raw": "t1"})``."""
        return _build(Config, _merge(as_dict(self), sections), "")

    def librdkafka(self, **extra: Any) -> dict[str, Any]:
        """Properties for a confluent-kafka client: bootstrap, then the file, then ``extra``."""
        props: dict[str, Any] = {"bootstrap.servers": self.kafka.bootstrap}
        if self.kafka.properties_file:
            props.update(read_properties(self.kafka.properties_file))
        props.update(extra)
        return props

    def masked(self) -> dict[str, Any]:
        """The effective configuration as a dict, secrets masked (for ``config show``)."""
        return as_dict(self, mask=True)


def as_dict(obj: Any, mask: bool = False) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: as_dict(getattr(obj, f.name), mask) for f in dataclasses.fields(obj)}
    if isinstance(obj, Secret):
        return ("****" if obj else "") if mask else obj.reveal()
    if isinstance(obj, Mapping):
        return {k: as_dict(v, mask) for k, v in obj.items()}
    return obj


def read_properties(path: str) -> dict[str, str]:
    """Read a librdkafka / Java properties file: ``key=value`` lines, ``#`` comments."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"kafka.properties_file: cannot read {path}: {exc.strerror}") from exc
    props: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ConfigError(f"kafka.properties_file: {path}:{n}: expected key=value")
        props[key.strip()] = value.strip()
    return props


def load_config(path: str | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Load TOML (``path``, else ``$JOBSTREAM_CONFIG``, else ./jobstream.toml if present),
    then apply ``JOBSTREAM_*`` environment overrides."""
    env = os.environ if environ is None else environ
    path = path or env.get("JOBSTREAM_CONFIG") or ("jobstream.toml"
                                                    if Path("jobstream.toml").is_file() else "")
    data: dict[str, Any] = {}
    if path:
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    data = _merge(data, _env_overrides(env))
    return _build(Config, data, path or "")


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name == "JOBSTREAM_CONFIG":
            continue
        path = name[len(ENV_PREFIX):].lower().split("__")
        if path[0] not in _SECTIONS:
            continue  # JOBSTREAM_* variables of other purposes (tests, scripts) are not ours
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


_SECTIONS = frozenset(f.name for f in dataclasses.fields(Config)) - {"source"}


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(dict(out[k]), v)
        else:
            out[k] = v
    return out


def _build(cls: type, data: Mapping[str, Any], source: str, where: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"unknown config key(s): {', '.join(where + k for k in sorted(unknown))}")
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name == "source":
            kwargs["source"] = source
            continue
        if f.name not in data:
            continue
        kwargs[f.name] = _coerce(hints[f.name], data[f.name], f"{where}{f.name}", source)
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, key: str, source: str) -> Any:
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(f"config key {key} must be a table")
        return _build(tp, value, source, key + ".")
    origin = typing.get_origin(tp)
    if origin in (Mapping, dict) or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"config key {key} must be a table")
        return types.MappingProxyType(dict(value))
    try:
        if tp is bool:
            if isinstance(value, str):
                if value.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(value)
                return value.lower() in ("1", "true", "yes", "on")
            return bool(value)
        if tp in (int, float):
            if isinstance(value, bool):
                raise ValueError(value)
            return tp(value)
        if tp is Secret:
            return Secret(str(value))
        if tp is str:
            return str(value)
        if tp == tuple[str, ...]:
            return _str_tuple(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"config key {key}: {value!r} is not a valid "
                          f"{getattr(tp, '__name__', tp)}") from exc
    return value


def _str_tuple(value: Any) -> tuple[str, ...]:
    """A list of strings from a TOML array, or from one comma-separated string (the only
    form an environment variable has)."""
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = list(value)
    else:
        raise TypeError(value)
    return tuple(item.strip() for item in items if item.strip())
