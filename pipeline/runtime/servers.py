"""A socket server served from a daemon thread, started and stopped one way.

The Slurm edge's jobcomp receiver (HTTP), its hook listener (a Unix socket) and every
process's metrics endpoint serve requests beside the process's main loop. All start the
same way (``serve_forever`` in a daemon thread, looking for a shutdown every 0.2 s so that
a stop is quick) and stop the same way (stop serving, close the socket, wait a bounded
time for the thread).
"""

from __future__ import annotations

import socketserver
import threading

__all__ = ["ServerThread"]

#: how often ``serve_forever`` looks for a shutdown request
POLL_INTERVAL_S = 0.2


class ServerThread:
    """``server`` served from a daemon thread named ``name``."""

    def __init__(self, server: socketserver.BaseServer, name: str) -> None:
        self.server = server
        self._thread = threading.Thread(target=server.serve_forever,
                                        kwargs={"poll_interval": POLL_INTERVAL_S},
                                        name=name, daemon=True)

    def start(self) -> ServerThread:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and close the server's socket; wait up to ``timeout`` for the
        thread (a request still being handled runs on in its own daemon thread)."""
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout)
