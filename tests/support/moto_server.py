"""``python -m moto.server`` with S3's conditional writes made atomic, as on S3 itself.

moto's threaded server checks ``If-None-Match: *`` / ``If-Match`` and then stores the
object in two steps, without a lock: two PUTs that arrive together can both pass the
check (CI, stop 38: two of six drivers both created the run lease). Amazon S3 and the
S3-compatible servers trainyard supports decide concurrent conditional writes to one key
atomically (one succeeds; the others get 412 or 409), and the run lease relies on that.
This wrapper serializes moto's object PUTs so the tests check trainyard's logic against
the guarantee the real service gives, not against the fake's race.

Usage (as the tests' conftest does): ``python tests/support/moto_server.py -H 127.0.0.1 -p PORT``.
"""

from __future__ import annotations

import functools
import os
import threading
import time

# Tests of this wrapper widen the window between moto's precondition check and its store,
# so that without the lock two writers would both pass the check every time.
CHECK_DELAY_ENV_VAR = "MOTO_SERVER_CHECK_DELAY_S"


def _serialize_object_puts() -> None:
    from moto.s3.responses import S3Response

    lock = threading.Lock()
    put_object = S3Response.put_object

    @functools.wraps(put_object)
    def atomic_put_object(self):  # type: ignore[no-untyped-def]
        with lock:  # the precondition check and the store, as one step
            return put_object(self)

    S3Response.put_object = atomic_put_object  # type: ignore[method-assign]


def _delay_precondition_checks(seconds: float) -> None:
    from moto.s3.models import S3Backend

    get_object = S3Backend.get_object

    @functools.wraps(get_object)
    def slow_get_object(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        found = get_object(self, *args, **kwargs)
        time.sleep(seconds)
        return found

    S3Backend.get_object = slow_get_object  # type: ignore[method-assign]


def main() -> None:
    _serialize_object_puts()
    delay = float(os.environ.get(CHECK_DELAY_ENV_VAR) or 0)
    if delay > 0:
        _delay_precondition_checks(delay)
    from moto.server import main as moto_main

    moto_main()


if __name__ == "__main__":
    main()
