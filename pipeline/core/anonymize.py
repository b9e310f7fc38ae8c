"""Anonymization policy: per field keep, pseudonymize (keyed HMAC) or drop.

Whatever the policy, job scripts and environments never leave this stage. With any identity
field not kept, the free-form payloads of an event (``jobspec``, ``R``-less ``record``, and
string values of ``context``) are scrubbed too, because they repeat user names, uids and
paths in places no field list can enumerate.

Pseudonyms are HMAC-SHA256 over ``<field>:<value>`` with the site key: stable across
restarts and replays, not reversible without the key. Integer fields (uid, gid) get an
integer pseudonym so the index mapping stays numeric.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pipeline.runtime.errors import ConfigError

__all__ = ["ACTIONS", "IDENTITY_FIELDS", "Anonymizer", "strip_private"]

ACTIONS = ("keep", "pseudonymize", "drop")

#: fields a policy may name; each is a job document field and a ``facts`` key
IDENTITY_FIELDS: tuple[str, ...] = ("user", "uid", "group", "gid", "cwd", "job_name", "bank")
_INT_FIELDS = frozenset({"uid", "gid"})

#: jobspec paths and record keys that hold scripts or environments (always removed)
_PRIVATE_SYSTEM_KEYS = ("environment", "files", "batch", "script")
_PRIVATE_RECORD_KEYS = frozenset({"script", "environment", "env", "batch_script", "std_in",
                                  "std_out", "std_err", "command"})


def strip_private(event: dict[str, Any]) -> dict[str, Any]:
    """Remove scripts and environments from an event dict (``JobEvent.to_dict`` shape)."""
    spec = event.get("jobspec")
    if isinstance(spec, Mapping):
        system = spec.get("attributes", {}).get("system")
        if isinstance(system, Mapping) and any(k in system for k in _PRIVATE_SYSTEM_KEYS):
            system = {k: v for k, v in system.items() if k not in _PRIVATE_SYSTEM_KEYS}
            attributes = {**spec["attributes"], "system": system}
            event["jobspec"] = {**spec, "attributes": attributes}
    record = event.get("record")
    if isinstance(record, Mapping) and _PRIVATE_RECORD_KEYS & record.keys():
        event["record"] = {k: v for k, v in record.items() if k not in _PRIVATE_RECORD_KEYS}
    return event


class Anonymizer:
    """Applies one policy to job documents and event dicts. Immutable after construction."""

    def __init__(self, policy: Mapping[str, str], key: bytes = b"") -> None:
        for field, action in policy.items():
            if field not in IDENTITY_FIELDS:
                raise ConfigError(f"anonymize.fields.{field}: unknown field; known: "
                                  + ", ".join(IDENTITY_FIELDS))
            if action not in ACTIONS:
                raise ConfigError(f"anonymize.fields.{field}: {action!r} is not one of "
                                  + ", ".join(ACTIONS))
        self.policy = {f: a for f, a in policy.items() if a != "keep"}
        if "pseudonymize" in self.policy.values() and not key:
            raise ConfigError("anonymize.key_file: pseudonymize needs a site key file")
        self._key = key

    @classmethod
    def from_config(cls, fields: Mapping[str, str], key_file: str) -> Anonymizer:
        key = b""
        if key_file:
            try:
                key = Path(key_file).read_bytes().strip()
            except OSError as exc:
                raise ConfigError(f"anonymize.key_file: cannot read {key_file}: "
                                  f"{exc.strerror}") from exc
            if len(key) < 16:
                raise ConfigError("anonymize.key_file: the key must be at least 16 bytes")
        return cls(fields, key)

    @property
    def active(self) -> bool:
        return bool(self.policy)

    def pseudonym(self, field: str, value: Any) -> Any:
        digest = hmac.new(self._key, f"{field}:{value}".encode(), hashlib.sha256).digest()
        if field in _INT_FIELDS:
            # 31 bits: stays a valid uid-like positive int in every mapping type
            return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF
        return f"{field[0]}-{digest[:8].hex()}"

    def _fields(self, values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        """The policy applied to the identity fields of ``values``, and a map of every
        sensitive string seen to its replacement (for scrubbing free-form payloads)."""
        out = dict(values)
        replacements: dict[str, str] = {}
        for field, action in self.policy.items():
            if out.get(field) is None:
                continue  # unknown stays unknown: no pseudonym of "None"
            original = out.pop(field)
            if action == "pseudonymize":
                out[field] = self.pseudonym(field, original)
            if isinstance(original, str | int) and str(original):
                replacement = out.get(field, "")
                replacements[str(original)] = str(replacement)
        return out, _longest_first(replacements)

    def document(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """A job document under the policy."""
        if not self.active:
            return dict(doc)
        out, replacements = self._fields(doc)
        # the job's users write these (Flux memos): free text, scrubbed as contexts are
        # (values, and a key naming an identity; other keys are kept, as in contexts)
        if out.get("user_annotations"):
            out["user_annotations"] = self._scrub(out["user_annotations"], replacements)
        return out

    def node_document(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """A node document under the policy: ``reason_by`` names a user, so the ``user``
        field's policy applies to it, and its name is scrubbed from the free-text
        ``reason`` as from an event's context."""
        return self._reason(doc)[0]

    def node_event(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """A node event dict (:func:`pipeline.fold.nodes.event_document`) under the policy:
        ``reason_by`` and ``reason`` as a node document's (:meth:`node_document`), and the
        name scrubbed from the string values of ``context`` too, as from a job event's."""
        out, replacements = self._reason(event)
        if replacements is not None:
            out["context"] = self._scrub(out.get("context") or {}, replacements)
        return out

    def _reason(self, values: Mapping[str, Any]
                ) -> tuple[dict[str, Any], dict[str, str] | None]:
        """``values`` with ``reason_by`` under the ``user`` field's policy and its name
        scrubbed from ``reason``; the replacements made, None when there is none to make
        (no policy for users, or no one set the reason)."""
        out = dict(values)
        if "user" not in self.policy or out.get("reason_by") is None:
            return out, None
        user, replacements = self._fields({"user": out["reason_by"]})
        out["reason_by"] = user.get("user")
        if out.get("reason"):
            out["reason"] = self._scrub(out["reason"], replacements)
        return out, replacements

    def event(self, event: Mapping[str, Any],
              known: Iterable[tuple[str, Any]] = ()) -> dict[str, Any]:
        """An event dict (``JobEvent.to_dict`` shape) under the policy, private data removed.

        ``known``, (field, value) pairs of the job's identities (from all its events), are
        scrubbed from free text too: most events state none of them in their facts.
        """
        out = strip_private(dict(event))
        if not self.active:
            return out
        facts, replacements = self._fields(out.get("facts") or {})
        for field, value in set(known):
            if field in self.policy:
                replacements.update(self._fields({field: value})[1])
        replacements = _longest_first(replacements)
        out["facts"] = facts
        # Free-form payloads repeat identities in unpredictable places: with a policy on,
        # jobspec and record go, and context strings are scrubbed.
        out.pop("jobspec", None)
        out.pop("record", None)
        out["context"] = self._scrub(out.get("context") or {}, replacements)
        return out

    def _scrub(self, value: Any, replacements: Mapping[str, str], key: str = "") -> Any:
        """Replace sensitive values anywhere in a payload.

        A value under a key that names an identity field (``userid``, ``SLURM_JOB_UID``,
        ``work_dir``...) gets that field's policy, whoever it names. Elsewhere, the known
        names and paths are replaced wherever they occur inside a string; numbers (uids)
        only where the key says it holds an id, since a bare ``0`` or ``1001`` is everywhere.
        """
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for k, v in value.items():
                field = _identity_field(str(k))
                if field in self.policy and isinstance(v, str | int) and not isinstance(v, bool):
                    if self.policy[field] == "pseudonymize":
                        pseudonym = self.pseudonym(field, v)
                        out[k] = str(pseudonym) if isinstance(v, str) else pseudonym
                    continue
                out[k] = self._scrub(v, replacements, str(k).lower())
            return out
        if isinstance(value, list):
            return [self._scrub(v, replacements, key) for v in value]
        id_key = any(hint in key for hint in _ID_KEY_HINTS)
        if isinstance(value, bool):
            return value
        if isinstance(value, int):
            return replacements.get(str(value), value) if id_key else value
        if isinstance(value, str):
            if id_key and value in replacements:
                return replacements[value]
            for original, replacement in replacements.items():
                if not original.isdigit() and original in value:
                    value = value.replace(original, replacement)
        return value


_ID_KEY_HINTS = ("uid", "gid", "user", "group")

#: context keys (lower case, without a ``slurm_job_`` prefix) that hold an identity field
_IDENTITY_KEYS: Mapping[str, str] = {
    "uid": "uid", "userid": "uid", "user_id": "uid",
    "gid": "gid", "group_id": "gid",
    "user": "user", "username": "user", "user_name": "user",
    "group": "group", "groupname": "group", "group_name": "group",
    "cwd": "cwd", "work_dir": "cwd", "workdir": "cwd", "current_working_directory": "cwd",
}


def _identity_field(key: str) -> str | None:
    k = key.lower()
    return _IDENTITY_KEYS.get(k.removeprefix("slurm_job_"))


def _longest_first(replacements: Mapping[str, str]) -> dict[str, str]:
    # a path containing the user name must be replaced as a whole
    return dict(sorted(replacements.items(), key=lambda kv: -len(kv[0])))
