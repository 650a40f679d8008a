"""The driver side of Horovod's Gloo rendezvous: an HTTP key-value store per attempt.

Horovod's C++ side (``HTTPStore``) PUTs and GETs keys under a scope (``global``,
``local_<host>``, ``cross_<local rank>``) and DELETEs its key when its rendezvous is
done; the server clears a scope once all its ranks are done. We reuse Horovod's request
handler (it owns that protocol) and run it our way: bound to the address the workers
are told, on a port the OS picks, in a daemon thread that stops promptly.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Sequence

logger = logging.getLogger("engine")

# How often serve_forever checks for shutdown (Horovod's default, 0.5 s, would add that
# much to every teardown).
_POLL_INTERVAL_S = 0.05


class RendezvousServer:
    """Horovod's rendezvous HTTP server, started on construction.

    Args:
        address: The driver's address as the workers reach it (Ray's node IP).
        slots: One entry per rank with ``hostname``, ``size``, ``local_rank``,
            ``local_size`` and ``cross_size`` (scope sizes come from them).
        verbose: Log every request when > 0.
    """

    def __init__(self, address: str, slots: Sequence[Any], verbose: int = 0) -> None:
        from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

        class Server(RendezvousHTTPServer):
            daemon_threads = True      # a handler stuck on a dead peer never blocks exit
            block_on_close = False

        try:
            self._httpd = Server((address, 0), RendezvousHandler, verbose)
        except OSError as exc:
            # The node IP Ray reports is not always a local address (NAT, containers).
            logger.info("Horovod rendezvous cannot bind %s (%s); listening on all "
                        "interfaces.", address, exc)
            self._httpd = Server(("", 0), RendezvousHandler, verbose)
        self._httpd.init(list(slots))
        self.address = address
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": _POLL_INTERVAL_S},
            name="trainyard-horovod-rendezvous", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        if self._thread is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
        self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

