"""A real PostgreSQL server for the tests: Debian's postgresql-15, a cluster
in a temporary directory (initdb, pg_ctl, a free port, its own socket
directory), started on first use and stopped when the test process ends.
Nothing is needed beyond the package (scripts/deps.sh installs it)."""
import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

PG_BIN = Path(os.environ.get("AIRLOCK_PG_BIN", "/usr/lib/postgresql/15/bin"))
# initdb refuses to run as root; the package's own user owns the cluster
PG_USER = "postgres"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_pg(*args, check=True, timeout=120):
    cmd = [str(a) for a in args]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", PG_USER, "--", *cmd]
    proc = subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}: "
                             f"{proc.stdout.decode(errors='replace')}{proc.stderr.decode(errors='replace')}")
    return proc


class PgCluster:
    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="airlock-pg-"))
        os.chmod(self.root, 0o755)
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.sock.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.root, PG_USER)
            shutil.chown(self.sock, PG_USER)
        self.port = _free_port()
        self.log = self.root / "postgres.log"
        self.serial = 0
        self.lock = threading.Lock()
        _as_pg(PG_BIN / "initdb", "-D", self.data, "-U", PG_USER, "-A", "trust", "-E", "UTF8", "--locale=C",
               "--no-sync")
        self.start()

    def start(self):
        # only the socket directory: no TCP listener for anyone else to reach;
        # fsync off: a test cluster that the OS never loses under it
        opts = (f"-k {self.sock} -p {self.port} -c listen_addresses='' -c fsync=off "
                f"-c max_connections=300 -c shared_buffers=64MB "
                # test_store_history.py counts the pages its statements touch
                f"-c shared_preload_libraries=pg_stat_statements")
        _as_pg(PG_BIN / "pg_ctl", "-D", self.data, "-l", self.log, "-o", opts, "-w", "-t", "60", "start")

    def stop(self, mode="fast"):
        _as_pg(PG_BIN / "pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop", check=False)

    def restart(self):
        self.stop()
        self.start()

    def uri(self, db):
        return f"postgresql://{PG_USER}@/{db}?host={self.sock}&port={self.port}"

    def psql(self, db, sql):
        return _as_pg(PG_BIN / "psql",
                      "-h", self.sock, "-p", self.port, "-U", PG_USER, "-d", db, "-v", "ON_ERROR_STOP=1",
                      "-At", "-c", sql).stdout.decode()

    def new_database(self, prefix="airlock", collate="C"):
        with self.lock:
            self.serial += 1
            name = f"{prefix}_{os.getpid()}_{self.serial}"
        self.psql("postgres", f"CREATE DATABASE \"{name}\" TEMPLATE template0 ENCODING 'UTF8' "
                              f"LC_COLLATE '{collate}' LC_CTYPE '{collate}'")
        return name

    def connect(self, db):
        import psycopg2
        conn = psycopg2.connect(host=str(self.sock), port=self.port, user=PG_USER, dbname=db)
        conn.autocommit = True
        return conn

    def destroy(self):
        self.stop("immediate")
        if os.environ.get("AIRLOCK_PG_KEEP"):
            print(f"(PostgreSQL cluster kept in {self.root}; its log: {self.log})")
            return
        shutil.rmtree(self.root, ignore_errors=True)


_CLUSTER = None


def cluster():
    """The test process's one cluster, started on first use."""
    global _CLUSTER
    if _CLUSTER is None:
        _CLUSTER = PgCluster()
        atexit.register(_CLUSTER.destroy)
    return _CLUSTER


def test_store():
    """The store the suite runs on: AIRLOCK_TEST_STORE=postgresql or sqlite (default)."""
    return os.environ.get("AIRLOCK_TEST_STORE", "sqlite")
