"""Soak: many concurrent async recalls and concurrent writers on one `AsyncMemory` for a bounded time,
then proof that nothing was lost.

    python -m bench.soak --seconds 60                     # embedded server in a temporary home
    python -m bench.soak --seconds 60 --dsn postgresql://...   # or MEMSODA_DSN: a schema of its own
    python -m bench.soak --seconds 60 --append-results    # also append the table to bench/RESULTS.md

Tenants are seeded, then `--recallers` tasks recall in a loop (the same few queries over and over, as
an agent does, plus one in ten never seen before, so the embedder runs too) while `--writers` tasks
add facts and episodes with unique content, and one in four of their writes races the others on one
single-valued relation ("is based in"). `--forgetters` tasks meanwhile move an entity of their own
from place to place (each new place ends the last one, `superseded_by` it) and forget the places
again, so `forget(entity=...)` races the writers and clears pointers into what it deletes.
Afterwards every tenant is exported: every acknowledged write must be there with the same content,
nothing else may be, and the stats must count them; then the invariants are counted in SQL (more
than one live fact of a single-valued relation, `superseded_by` naming no fact, half-written facts:
a fact without its subject's `fact_entities` row or naming an entity that is gone, entity and scope
counts that differ from the rows). A recall that returns a row of another tenant counts as an
error. The run passes (exit status 0) only with zero errors and zero violations. Latencies include
waiting for a pooled connection: that is what callers feel.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import itertools
import json
import math
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from memsoda_core import AsyncMemory, ScopeArgs
from memsoda_core.embedders import Embedder

PEOPLE = ["ana", "ben", "carla", "dev", "emil", "fatima", "goran", "hana", "ivo", "jules", "kenji", "lea"]
PLACES = ["lisbon", "porto", "berlin", "oslo", "kyoto", "lima", "accra", "quebec", "tartu", "hobart"]
THINGS = [
    "honda civic",
    "breaking bad",
    "netflix",
    "green tea",
    "c++",
    "climbing",
    "sourdough",
    "chess",
    "jazz",
    "a red bike",
    "the piano",
    "marathons",
]
PREDICATES = ["likes", "lives in", "works in", "drives", "watches", "plays", "visited", "wants to learn"]
BASED_IN = "is based in"
"""The single-valued predicate the writers and forgetters race on (the seed does not use it)."""
QUERIES = [
    "anything good on netflix tonight?",
    "what does the user drive",
    "where does ana live",
    "who plays chess",
    "ideas for a weekend in porto",
    "what music does the user like",
    "c++",
    "tell me about kyoto",
    "what should I cook for dinner",
    "who wants to learn the piano",
    "gift ideas for ben",
    "what did we say about marathons",
]


@dataclass(frozen=True, kw_only=True)
class SoakConfig:
    seconds: float = 60.0
    recallers: int = 64
    writers: int = 4
    forgetters: int = 2
    """Tasks that move an entity of their own and forget where it was, racing the writers."""
    tenants: int = 4
    seed_facts: int = 200
    """Facts per tenant before the clock starts."""
    pool_size: int = 10
    pool_timeout: float = 10.0
    analyze: bool = True
    """Refresh the planner's statistics after seeding, as autovacuum would within a minute or so: the
    figures are then steady-state ones. A store that was never analyzed plans recalls badly (about
    35 times slower on 800 facts); `--no-analyze` measures that cold case."""
    seed: int = 7


@dataclass(kw_only=True)
class SoakReport:
    config: SoakConfig
    dataset: str = ""
    """Where the tenants lived (projects tenant-0, tenant-1, ...); forgotten at the end."""
    elapsed_s: float = 0.0
    baseline_ms: list[float] = field(default_factory=list)
    """Recalls one at a time before the load: the service time without queueing."""
    recall_ms: list[float] = field(default_factory=list)
    write_ms: list[float] = field(default_factory=list)
    facts_acknowledged: int = 0
    episodes_acknowledged: int = 0
    degraded: int = 0
    errors: list[str] = field(default_factory=list)
    leaks: int = 0
    """Rows of another tenant seen by a recall (also counted in errors)."""
    missing: list[int] = field(default_factory=list)
    changed: list[int] = field(default_factory=list)
    unacknowledged: list[int] = field(default_factory=list)
    miscounted: list[str] = field(default_factory=list)
    forgets: int = 0
    """`forget(entity=...)` calls that returned during the load."""
    violations: dict[str, int] = field(default_factory=dict)
    """Each invariant (`INVARIANTS`) and the rows breaking it after the run."""

    @property
    def ok(self) -> bool:
        broken = any(self.violations.values())
        return not (self.errors or self.missing or self.changed or self.unacknowledged or self.miscounted or broken)

    def markdown(self, *, where: str) -> str:
        c = self.config
        rows = [
            ("recall, one at a time before the load", self.baseline_ms),
            ("recall under load", self.recall_ms),
            ("write under load (add_facts / add_episodes)", self.write_ms),
        ]
        lines = [
            f"## Soak: {c.recallers} concurrent recalls, {c.writers} writers and {c.forgetters} forgetters "
            f"for {c.seconds:g} s",
            "",
            f"`python -m bench soak --seconds {c.seconds:g} --recallers {c.recallers} --writers {c.writers} "
            f"--forgetters {c.forgetters} --tenants {c.tenants} --seed-facts {c.seed_facts}` on {where}: "
            f"one `AsyncMemory` (pool {c.pool_size}, "
            f"pool timeout {c.pool_timeout:g} s), {c.tenants} tenants seeded with {c.seed_facts} facts each"
            + (", statistics refreshed after seeding" if c.analyze else ", never analyzed (`--no-analyze`)")
            + ". Latency includes the wait for a pooled connection.",
            "",
            "| operation | calls | per second | p50 ms | p95 ms | p99 ms | max ms |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, samples in rows:
            seconds = sum(samples) / 1000 if samples is self.baseline_ms else self.elapsed_s
            rate = len(samples) / seconds if seconds else 0.0
            lines.append(
                f"| {name} | {len(samples)} | {rate:.1f} | {percentile(samples, 50):.1f} | "
                f"{percentile(samples, 95):.1f} | {percentile(samples, 99):.1f} | {max(samples, default=0):.1f} |"
            )
        verdict = "PASS" if self.ok else "FAIL"
        lines += [
            "",
            f"{verdict}: {len(self.errors)} errors; {self.facts_acknowledged} facts and {self.episodes_acknowledged} "
            f"episodes acknowledged, missing afterwards {len(self.missing)}, changed {len(self.changed)}, "
            f"present but never acknowledged {len(self.unacknowledged)}, stats miscounts {len(self.miscounted)}; "
            f"rows of another tenant in recalls {self.leaks}; degraded recalls {self.degraded}; "
            f"{self.forgets} forget(entity) calls raced the writers.",
            "",
            "| invariant after the run | violations |",
            "|---|---:|",
            *(f"| {name} | {count} |" for name, count in self.violations.items()),
            "",
            f"Machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}; "
            f"{datetime.now(UTC):%Y-%m-%d}.",
        ]
        if self.errors:
            lines += ["", "First errors:", *(f"- `{e}`" for e in self.errors[:5])]
        return "\n".join(lines) + "\n"


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (0 for no samples)."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def seed_facts(rng: random.Random, count: int) -> list[dict[str, Any]]:
    facts = []
    for _ in range(count):
        predicate = rng.choice(PREDICATES)
        obj = rng.choice(PLACES if predicate in ("lives in", "works in", "visited") else THINGS)
        facts.append({"subject": rng.choice([*PEOPLE, "user"]), "predicate": predicate, "object": obj})
    return facts


@dataclass(kw_only=True)
class _Tenant:
    scope: ScopeArgs
    facts: dict[int, tuple[str, str, str]] = field(default_factory=dict)
    episodes: dict[int, str] = field(default_factory=dict)


async def soak(memory: AsyncMemory, config: SoakConfig) -> SoakReport:
    """Run the load on `memory` (tenants under a fresh dataset name), check, clean up, report."""
    report = SoakReport(config=config, dataset=f"soak-{uuid.uuid4().hex[:8]}")
    rng = random.Random(config.seed)
    tenants = [_Tenant(scope={"dataset": report.dataset, "project": f"tenant-{i}"}) for i in range(config.tenants)]
    try:
        for tenant in tenants:
            await memory.set_single_valued([BASED_IN], **tenant.scope)
            facts = seed_facts(rng, config.seed_facts)
            for start in range(0, len(facts), 100):
                batch = facts[start : start + 100]
                ids = await memory.add_facts(batch, **tenant.scope)
                tenant.facts.update(
                    {i: (f["subject"], f["predicate"], f["object"]) for i, f in zip(ids, batch, strict=True)}
                )
        report.facts_acknowledged = sum(len(t.facts) for t in tenants)
        if config.analyze:
            await analyze(memory)
        for n, query in enumerate(QUERIES * 3):  # also warms the query-embedding cache
            tenant = tenants[n % len(tenants)]
            started_one = time.perf_counter()
            await memory.recall(query, dataset=tenant.scope["dataset"], project=tenant.scope["project"])
            if n >= len(QUERIES):
                report.baseline_ms.append((time.perf_counter() - started_one) * 1000)
        loop = asyncio.get_running_loop()
        started = loop.time()
        stop_at = started + config.seconds
        await asyncio.gather(
            *(
                _recaller(memory, tenants, report, random.Random(config.seed + i), stop_at)
                for i in range(config.recallers)
            ),
            *(
                _writer(memory, tenants, report, n, random.Random(-config.seed - n), stop_at)
                for n in range(config.writers)
            ),
            *(_forgetter(memory, tenants, report, n, stop_at) for n in range(config.forgetters)),
        )
        report.elapsed_s = loop.time() - started
        report.violations = await count_violations(memory, report.dataset)
        for tenant, number in itertools.product(tenants, range(config.forgetters)):  # not acknowledged writes
            await memory.forget(entity=f"mover {number}", **tenant.scope)
        await _verify(memory, tenants, report)
    finally:
        for tenant in tenants:
            try:
                await memory.forget(**tenant.scope)
            except Exception as exc:  # cleanup must not hide the report
                report.errors.append(f"cleanup: {type(exc).__name__}: {exc}")
    return report


async def analyze(memory: AsyncMemory) -> None:
    """ANALYZE every table of the store's schema."""
    async with await psycopg.AsyncConnection.connect(memory.dsn, autocommit=True) as conn:
        for table in ("scopes", "entities", "facts", "fact_entities", "episodes"):
            await conn.execute(
                sql.SQL("ANALYZE {}.{}").format(sql.Identifier(memory.info.schema), sql.Identifier(table))
            )


async def _recaller(
    memory: AsyncMemory, tenants: list[_Tenant], report: SoakReport, rng: random.Random, stop_at: float
) -> None:
    loop = asyncio.get_running_loop()
    while loop.time() < stop_at:
        tenant = rng.choice(tenants)
        roll = rng.random()
        query = None if roll < 0.05 else rng.choice(QUERIES)
        if query is not None and roll > 0.9:
            query = f"{query} {rng.choice(PEOPLE)} {rng.randrange(10**6)}"  # never seen: embedded now
        started = time.perf_counter()
        try:
            result = await memory.recall(query, dataset=tenant.scope["dataset"], project=tenant.scope["project"])
        except Exception as exc:
            report.errors.append(f"recall: {type(exc).__name__}: {exc}")
            continue
        report.recall_ms.append((time.perf_counter() - started) * 1000)
        report.degraded += result.degraded
        foreign = [s.fact.id for s in result.facts if (s.fact.dataset, s.fact.project) != tuple(tenant.scope.values())]
        if foreign:
            report.leaks += len(foreign)
            report.errors.append(f"recall in {tenant.scope} returned rows of another tenant: {foreign}")


async def _writer(
    memory: AsyncMemory, tenants: list[_Tenant], report: SoakReport, number: int, rng: random.Random, stop_at: float
) -> None:
    loop = asyncio.get_running_loop()
    sequence = 0
    while loop.time() < stop_at:
        sequence += 1
        tenant = rng.choice(tenants)
        started = time.perf_counter()
        try:
            if sequence % 5 == 0:
                text = f"writer {number} episode {sequence}: talked about {rng.choice(THINGS)}"
                (episode_id,) = await memory.add_episodes([{"text": text, "thread_id": f"w{number}"}], **tenant.scope)
                tenant.episodes[episode_id] = text
                report.episodes_acknowledged += 1
            elif sequence % 4 == 0:  # races the other writers on one single-valued relation
                fact = {"subject": "user", "predicate": BASED_IN, "object": rng.choice(PLACES)}
                ids = await memory.add_facts([fact], **tenant.scope)
                tenant.facts.update({i: ("user", BASED_IN, fact["object"]) for i in ids})
                report.facts_acknowledged += len(ids)
            else:
                batch = [
                    {
                        "subject": rng.choice(PEOPLE),
                        "predicate": rng.choice(PREDICATES),
                        "object": f"item {number}-{sequence}-{k}",
                        "object_type": "LITERAL",
                    }
                    for k in range(rng.randint(1, 5))
                ]
                ids = await memory.add_facts(batch, **tenant.scope)
                tenant.facts.update(
                    {i: (f["subject"], f["predicate"], f["object"]) for i, f in zip(ids, batch, strict=True)}
                )
                report.facts_acknowledged += len(ids)
        except Exception as exc:
            report.errors.append(f"write: {type(exc).__name__}: {exc}")
            continue
        report.write_ms.append((time.perf_counter() - started) * 1000)


async def _forgetter(
    memory: AsyncMemory, tenants: list[_Tenant], report: SoakReport, number: int, stop_at: float
) -> None:
    """In each tenant in turn, move "mover <n>" to a place and on to the next (a single-valued
    relation: the first fact ends, `superseded_by` the second), then forget the second place: the
    pointer into the deleted fact must be cleared. Its facts are not acknowledged writes: the
    mover is forgotten once the invariants are counted."""
    loop = asyncio.get_running_loop()
    sequence = 0
    while loop.time() < stop_at:
        sequence += 1
        tenant = tenants[sequence % len(tenants)]
        mover = f"mover {number}"
        try:
            for step in ("from", "to"):
                place = f"town {number}-{sequence}-{step}"
                await memory.add_facts([{"subject": mover, "predicate": BASED_IN, "object": place}], **tenant.scope)
            await memory.forget(entity=f"town {number}-{sequence}-to", **tenant.scope)
            report.forgets += 1
        except Exception as exc:
            report.errors.append(f"forgetter: {type(exc).__name__}: {exc}")


INVARIANTS = {
    "live facts of one single-valued relation, beyond the first": """
        SELECT coalesce(sum(n - 1), 0) FROM (
            SELECT count(*) AS n FROM {s}.facts f
            JOIN {s}.single_valued sv ON sv.dataset = f.dataset AND sv.project = f.project
                                     AND sv.predicate = lower(f.predicate)
            WHERE f.dataset = %(dataset)s AND f.invalid_at IS NULL
            GROUP BY f.project, f.subject, lower(f.predicate) HAVING count(*) > 1) r""",
    "superseded_by naming no fact": """
        SELECT count(*) FROM {s}.facts p
        WHERE p.dataset = %(dataset)s AND p.superseded_by IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM {s}.facts f
                          WHERE f.dataset = p.dataset AND f.project = p.project AND f.id = p.superseded_by)""",
    "facts without their subject's fact_entities row": """
        SELECT count(*) FROM {s}.facts f
        WHERE f.dataset = %(dataset)s
          AND NOT EXISTS (SELECT 1 FROM {s}.fact_entities fe WHERE fe.dataset = f.dataset
                          AND fe.project = f.project AND fe.fact_id = f.id AND fe.entity_id = f.subject_id)""",
    "facts naming an object entity that is gone": """
        SELECT count(*) FROM {s}.facts f
        WHERE f.dataset = %(dataset)s AND f.object_id IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM {s}.entities e
                          WHERE e.dataset = f.dataset AND e.project = f.project AND e.id = f.object_id)""",
    "entities whose fact_count differs from their links": """
        SELECT count(*) FROM {s}.entities e
        WHERE e.dataset = %(dataset)s
          AND e.fact_count <> (SELECT count(*) FROM {s}.fact_entities fe
                               WHERE fe.dataset = e.dataset AND fe.project = e.project AND fe.entity_id = e.id)""",
    "scopes whose fact_count differs from their facts": """
        SELECT count(*) FROM {s}.scopes sc
        WHERE sc.dataset = %(dataset)s
          AND sc.fact_count <> (SELECT count(*) FROM {s}.facts f
                                WHERE f.dataset = sc.dataset AND f.project = sc.project)""",
}
"""Each invariant of the store as SQL counting the rows of the soak's dataset that break it."""


async def count_violations(memory: AsyncMemory, dataset: str) -> dict[str, int]:
    """Each of `INVARIANTS` and its count in `dataset`, read on a connection of its own."""
    counts: dict[str, int] = {}
    async with await psycopg.AsyncConnection.connect(memory.dsn, autocommit=True) as conn:
        for name, query in INVARIANTS.items():
            statement = sql.SQL(query).format(s=sql.Identifier(memory.info.schema))
            row = await (await conn.execute(statement, {"dataset": dataset})).fetchone()
            counts[name] = int(row[0]) if row else 0
    return counts


async def _verify(memory: AsyncMemory, tenants: list[_Tenant], report: SoakReport) -> None:
    """Every acknowledged write is there with its content; nothing else is; stats agree."""
    for tenant in tenants:
        buffer = io.StringIO()
        await memory.export_jsonl(buffer, **tenant.scope)
        records = [json.loads(line) for line in buffer.getvalue().split("\n") if line]
        facts = {r["id"]: (r["subject"], r["predicate"], r["object"]) for r in records if r["kind"] == "fact"}
        episodes = {r["id"]: r["text"] for r in records if r["kind"] == "episode"}
        for acknowledged, present in ((tenant.facts, facts), (tenant.episodes, episodes)):
            report.missing += [i for i in acknowledged if i not in present]
            report.changed += [i for i in acknowledged if i in present and present[i] != acknowledged[i]]
            report.unacknowledged += [i for i in present if i not in acknowledged]
        rows = await memory.stats(**tenant.scope)
        counted = (rows[0]["facts"], rows[0]["episodes"]) if rows else (0, 0)
        if counted != (len(tenant.facts), len(tenant.episodes)):
            report.miscounted.append(
                f"{tenant.scope}: stats {counted}, acknowledged {len(tenant.facts)}, {len(tenant.episodes)}"
            )


async def run(
    config: SoakConfig, *, dsn: str | None = None, embedder: Embedder | None = None
) -> tuple[SoakReport, str]:
    """Open the store (a fresh schema on `dsn` / MEMSODA_DSN, else an embedded server in a temporary
    home), soak it, and tear it down. Returns the report and a description of the store."""
    dsn = dsn or os.environ.get("MEMSODA_DSN")
    if dsn:
        schema = f"soak_{uuid.uuid4().hex[:8]}"
        memory = await AsyncMemory.open(
            dsn, embedder, schema=schema, pool_size=config.pool_size, pool_timeout=config.pool_timeout
        )
        try:
            return await soak(memory, config), "the given PostgreSQL"
        finally:
            await memory.close()
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    home = tempfile.mkdtemp(prefix="memsoda-soak-")
    try:
        memory = await AsyncMemory.open(
            embedder=embedder, home=home, pool_size=config.pool_size, pool_timeout=config.pool_timeout
        )
        try:
            return await soak(memory, config), "the embedded PostgreSQL over its Unix socket"
        finally:
            await memory.close()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _embedder(name: str) -> Embedder:
    if name == "hash":
        from bench.hashembed import HashEmbedder

        return HashEmbedder()
    from memsoda_core import LocalEmbedder

    return LocalEmbedder()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the load runs (default 60)")
    parser.add_argument("--recallers", type=int, default=64, help="concurrent recall loops (default 64)")
    parser.add_argument("--writers", type=int, default=4, help="concurrent writer loops (default 4)")
    parser.add_argument(
        "--forgetters", type=int, default=2, help="loops moving an entity and forgetting it (default 2)"
    )
    parser.add_argument("--tenants", type=int, default=4)
    parser.add_argument("--seed-facts", type=int, default=200, help="facts per tenant before the clock starts")
    parser.add_argument("--pool-size", type=int, default=10)
    parser.add_argument("--pool-timeout", type=float, default=10.0)
    parser.add_argument("--no-analyze", action="store_true", help="do not ANALYZE after seeding (the cold case)")
    parser.add_argument("--dsn", help="a PostgreSQL with pgvector (default: MEMSODA_DSN, else embedded)")
    parser.add_argument(
        "--embedder",
        choices=("local", "hash"),
        default="local",
        help="the offline model (default) or the bench's hashing embedder",
    )
    parser.add_argument("--append-results", action="store_true", help="append the table to bench/RESULTS.md")
    args = parser.parse_args(argv)
    config = SoakConfig(
        seconds=args.seconds,
        recallers=args.recallers,
        writers=args.writers,
        forgetters=args.forgetters,
        tenants=args.tenants,
        seed_facts=args.seed_facts,
        pool_size=args.pool_size,
        pool_timeout=args.pool_timeout,
        analyze=not args.no_analyze,
    )
    report, where = asyncio.run(run(config, dsn=args.dsn, embedder=_embedder(args.embedder)))
    text = report.markdown(where=where)
    sys.stdout.write(text)
    if args.append_results:
        results = Path(__file__).with_name("RESULTS.md")
        with results.open("a", encoding="utf-8") as handle:
            handle.write("\n" + text)
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
