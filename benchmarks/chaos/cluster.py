"""A private PostgreSQL cluster the chaos run owns: ``initdb`` + ``pg_ctl`` on a free port.

The scenarios stop, restart and crash PostgreSQL, so they never run against a server anybody
else uses: the cluster lives in a temporary directory, listens on 127.0.0.1 on a port nobody
holds, and is stopped and deleted when the run ends (even on Ctrl-C).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

#: initdb refuses to run as root: a root run hands the cluster to this account.
SERVICE_ACCOUNT = "postgres"


def find_bin_dir() -> Path:
    """The newest ``/usr/lib/postgresql/*/bin`` holding ``pg_ctl`` (or ``$CHAOS_PG_BIN``)."""
    if os.environ.get("CHAOS_PG_BIN"):
        return Path(os.environ["CHAOS_PG_BIN"])
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(Path(p).parent.parent.name.split(".")[0]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).parent
    raise RuntimeError("no PostgreSQL binaries found (set CHAOS_PG_BIN to their directory)")


def free_port() -> int:
    """A TCP port nobody listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateCluster:
    """One throw-away PostgreSQL cluster: ``start``, ``stop``, ``restart``, ``remove``."""

    def __init__(self, bin_dir: Path | None = None) -> None:
        self.bin_dir = bin_dir or find_bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="ultjobs-chaos-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = free_port()
        self.user = "postgres"
        self._run_as = self._service_account()

    def _service_account(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        try:
            entry = pwd.getpwnam(SERVICE_ACCOUNT)
        except KeyError:
            raise RuntimeError(f"initdb refuses root and there is no {SERVICE_ACCOUNT!r} "
                               "account to run the cluster as; run as another user") from None
        os.chmod(self.root, 0o755)
        os.chown(self.root, entry.pw_uid, entry.pw_gid)
        return ["runuser", "-u", SERVICE_ACCOUNT, "--"]

    def _ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [*self._run_as, str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-l",
               str(self.log), *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def init(self) -> None:
        """Create the cluster: trust auth on localhost only, small, fsync off (chaos, not
        durability of the machine, is what is tried; a crash of PostgreSQL itself still loses
        nothing committed, as it keeps its WAL)."""
        subprocess.run([*self._run_as, str(self.bin_dir / "initdb"), "-D", str(self.data),
                        "-U", self.user, "--auth=trust", "-E", "UTF8", "--no-instructions"],
                       capture_output=True, text=True, check=True, timeout=120)
        options = {
            "port": str(self.port), "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.root}'", "max_connections": "200",
            "shared_buffers": "32MB", "synchronous_commit": "on", "fsync": "off",
            "full_page_writes": "off", "log_min_messages": "warning",
        }
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in options.items())

    def start(self) -> None:
        self._ctl("-w", "-t", "60", "-o", f"-p {self.port}", "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-w", "-t", "60", "-m", mode, "stop", check=False)

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m fast|immediate``: every connection is cut; ``immediate`` is a
        crash (no checkpoint, WAL replayed at start)."""
        self._ctl("-w", "-t", "60", "-m", mode, "restart")

    def is_running(self) -> bool:
        return self._ctl("status", check=False).returncode == 0

    def psql(self, sql: str, database: str = "postgres") -> str:
        out = subprocess.run([str(self.bin_dir / "psql"), "-h", "127.0.0.1", "-p",
                              str(self.port), "-U", self.user, "-d", database, "-At", "-c", sql],
                             capture_output=True, text=True, check=True, timeout=60)
        return out.stdout

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = subprocess.run([str(self.bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p",
                                    str(self.port)], capture_output=True)
            if ready.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"the private cluster did not come up; see {self.log}")

    def remove(self) -> None:
        if self.data.exists():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def env(self, database: str) -> dict[str, str]:
        """What the chaos settings read to reach this cluster."""
        return {"CHAOS_PG_PORT": str(self.port), "CHAOS_PG_USER": self.user,
                "CHAOS_PG_NAME": database}

    def __enter__(self) -> PrivateCluster:
        self.init()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def backend_pids(cluster: PrivateCluster, database: str, exclude: Sequence[int] = ()) -> list[int]:
    """The backends connected to ``database``, other than ``exclude``."""
    rows = cluster.psql(f"SELECT pid FROM pg_stat_activity WHERE datname = '{database}' "
                        "AND pid <> pg_backend_pid()")
    return [int(p) for p in rows.split() if int(p) not in exclude]
