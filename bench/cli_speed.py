"""`python -m bench cli`: the command line's wall time, each command a fresh process as a user runs it.

With `memsoda server start` running in a temporary home (PostgreSQL and the embedding service):
`memsoda recall` beside `memsoda stats` (which embeds nothing), interleaved run by run; then the same
recall with the server started `--no-embed` (the CLI loads the model itself); and a fresh process's
cold `Memory.open()` + first recall (the model loads in that process).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import environment, markdown_table
from memsoda_core import embed_service

QUERY = "anything good on Netflix tonight?"
SCOPE = ("--dataset", "bench", "--project", "cli")
SAMPLE = Path(__file__).resolve().parent.parent / "memsoda_core" / "data" / "sample.jsonl"
LOAD_DEADLINE_S = 900.0

COLD = """
import json, sys, time
start = time.perf_counter()
from memsoda_core import Memory
imported = time.perf_counter()
memory = Memory.open(home=sys.argv[1])
opened = time.perf_counter()
first = memory.recall(sys.argv[2], dataset="bench", project="cli")
recalled = time.perf_counter()
second = memory.recall(sys.argv[2] + " again", dataset="bench", project="cli")
again = time.perf_counter()
memory.close()
assert not first.degraded and not second.degraded, (first.degraded_reason, second.degraded_reason)
print(json.dumps({"import": imported - start, "open": opened - imported, "first": recalled - opened,
                  "second": again - recalled}))
"""


def _env() -> dict[str, str]:
    drop = ("MEMSODA_DSN", "MEMSODA_EMBEDDER", "OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMSODA_HOME")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "NO_COLOR": "1", "COLUMNS": "200"}


def _memsoda(home: Path, *args: str) -> float:
    """Seconds one `memsoda --home HOME ARGS` process took (it must succeed)."""
    argv = [sys.executable, "-m", "memsoda_core.cli", "--home", str(home), *args]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=1800)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")
    if args[0] == "recall" and "degraded" in done.stderr:
        raise RuntimeError(f"recall degraded: {done.stderr.strip()}")
    return elapsed


def _start(home: Path, *, embed: bool) -> None:
    _memsoda(home, "server", "start", "--embed" if embed else "--no-embed")
    if embed:
        deadline = time.monotonic() + LOAD_DEADLINE_S
        while embed_service.hello(home) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no embedding service; see {home / 'server.log'}")
            time.sleep(0.5)


def _row(name: str, samples: list[float], base: float | None = None) -> list[Any]:
    median = statistics.median(samples)
    ratio = f"{median / base:.2f}x" if base else ""
    return [name, len(samples), median, min(samples), max(samples), ratio]


def run(*, runs: int = 5, cold_runs: int = 2, unserved_runs: int = 2) -> str:
    home = Path(tempfile.mkdtemp(prefix="memsoda-bench-cli-"))
    os.chmod(home, 0o755)
    try:
        _start(home, embed=True)
        try:
            _memsoda(home, "import", str(SAMPLE), *SCOPE)
            _memsoda(home, "recall", QUERY, *SCOPE)  # warm the server's caches once
            stats: list[float] = []
            recall: list[float] = []
            for _ in range(runs):
                stats.append(_memsoda(home, "stats", *SCOPE))
                recall.append(_memsoda(home, "recall", QUERY, *SCOPE))
            cold: list[dict[str, float]] = []
            for _ in range(cold_runs):
                done = subprocess.run(
                    [sys.executable, "-c", COLD, str(home), QUERY],
                    capture_output=True,
                    text=True,
                    env=_env(),
                    timeout=1800,
                    check=True,
                )
                cold.append(json.loads(done.stdout.strip().splitlines()[-1]))
        finally:
            _memsoda(home, "server", "stop")
        unserved: list[float] = []
        if unserved_runs:
            _start(home, embed=False)
            try:
                for _ in range(unserved_runs):
                    unserved.append(_memsoda(home, "recall", QUERY, *SCOPE))
            finally:
                _memsoda(home, "server", "stop")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    base = statistics.median(stats)
    rows = [
        _row("memsoda stats (embeds nothing)", stats),
        _row("memsoda recall, through the server's embedding service", recall, base),
    ]
    if unserved:
        rows.append(_row("memsoda recall, server started --no-embed (the CLI loads the model)", unserved, base))
    names = {
        "import": "import memsoda_core",
        "open": "Memory.open() (loads the model)",
        "first": "first recall",
        "second": "second recall",
    }
    cold_rows = [
        [name, len(cold), statistics.median(c[key] for c in cold), min(c[key] for c in cold)]
        for key, name in names.items()
    ]
    return "\n".join(
        [
            f"CLI wall time, each command a fresh process ({environment()})",
            "",
            markdown_table(["command (server running)", "runs", "median s", "min s", "max s", "vs stats"], rows),
            "",
            "A fresh process: cold `Memory.open()` + first recall (the local model loads in the process)",
            "",
            markdown_table(["step", "runs", "median s", "min s"], cold_rows),
            "",
        ]
    )
