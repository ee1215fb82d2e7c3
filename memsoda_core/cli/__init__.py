"""The `memsoda` command line: demo, recall, add, profile, import/export, stats, maintain, reembed, forget,
forget-source, retention, doctor, server.

Global options pick the store: `--dsn`, else the embedded server under `--home`, else
`MEMSODA_DSN`, else the one under `MEMSODA_HOME` (the command line beats the environment; the home
also says where a served model runs),
and `--embedder` the model (else `MEMSODA_EMBEDDER`, else the store's). Any `MemsodaError` (and
any file error) prints one red line and exits with status 1; `--verbose` adds the traceback.
Usage errors exit with status 2.

    app.py      the Typer app: global options, command registration, error handling
    common.py   Settings, the embedder of a command (--embedder, the store's model, the served model), the options
    output.py   consoles, JSON, notes, spinners and tables
    store.py    opening a Memory for a command (without a model when it never embeds)
    demo.py     demo
    recall.py   recall, add, forget
    profile.py  profile (the standing profile for a system prompt)
    jsonl.py    import, export
    stats.py    stats, maintain
    reembed.py  reembed (another embedding model, online)
    lifetime.py forget-source, retention
    doctor.py   doctor and its checks
    distribute.py  distribute (a store on a Citus cluster)
    server.py   server start|stop|status (and the hidden `hold` that `start` runs, which serves the model)
"""

from __future__ import annotations

import warnings

from memsoda_core.cli.app import app
from memsoda_core.cli.common import Settings
from memsoda_core.cli.doctor import Check, run_checks
from memsoda_core.cli.recall import signal_table
from memsoda_core.cli.server import server_status

__all__ = ["Check", "Settings", "app", "main", "run_checks", "server_status", "signal_table"]


def main(argv: list[str] | None = None) -> int:
    """Run the `memsoda` command line; returns the exit status."""
    # The embedded server's package warns about an unset XDG_RUNTIME_DIR (common in containers and
    # CI) and falls back to /tmp, which is fine; keep that noise out of every command's output.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    try:
        app(args=argv, prog_name="memsoda")
    except SystemExit as exc:
        if exc.code is None:
            return 0
        return exc.code if isinstance(exc.code, int) else 1
    return 0
