"""A stand-in for the ``flux`` Python bindings (no Flux can run here): just the calls the
edge makes -- ``Flux(uri)``, ``attr_get``, a streaming ``rpc`` with ``wait_for``,
``get_str`` and ``reset`` -- serving responses from ``FAKE_FLUX_RESPONSES`` (a file of
JSON lines), then ENODATA (end of stream) or the errno in ``FAKE_FLUX_ERRNO``."""

import errno
import os

from . import constants  # noqa: F401

requests = []


class _RPC:
    def __init__(self, lines, end_errno):
        self._lines = lines
        self._end = end_errno
        self._i = 0

    def wait_for(self, timeout=-1.0):
        return self

    def get_str(self):
        if self._i < len(self._lines):
            return self._lines[self._i]
        raise OSError(self._end, os.strerror(self._end))

    def reset(self):
        self._i += 1


class Flux:
    def __init__(self, uri=None):
        if os.environ.get("FAKE_FLUX_DOWN"):
            raise OSError(errno.ENOENT, "No such file or directory")
        self.uri = uri

    def attr_get(self, name):
        assert name == "security.owner"
        return os.environ.get("FAKE_FLUX_OWNER", str(os.getuid()))

    def rpc(self, topic, payload, nodeid, flags):
        requests.append((topic, payload, nodeid, flags))
        with open(os.environ["FAKE_FLUX_RESPONSES"]) as fh:
            lines = [ln.rstrip("\n") for ln in fh if ln.strip()]
        return _RPC(lines, int(os.environ.get("FAKE_FLUX_ERRNO", errno.ENODATA)))
