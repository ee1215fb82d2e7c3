"""`python -m bench citus --shard-direct`: what a small tenant's recall statement would cost read
straight from its shards on the worker that holds them, with a kept plan: a routing memsoda does
not do, measured to size it (bench/RESULTS.md, section 7).

Citus sends each task to its worker unnamed, so the worker parses and plans the statement at every
call; one node keeps the plan of a prepared statement. Here the statement of each Citus recall (the
tenant named, as the Citus layout writes it) runs three ways right after that recall: prepared on
one node; prepared through the coordinator (as memsoda runs it); and prepared on a
direct connection to the worker, each table replaced by the tenant's shard of it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from bench.capture import captured_recalls
from bench.common import connect
from memsoda_core import Memory
from memsoda_core.layouts.access import ScopeAccess
from memsoda_core.recall.statements import kept_hits_statement
from memsoda_core.validation import Scope

FORMS = ("one node, plan kept", "through the coordinator (memsoda's)", "the worker's shards directly, plan kept")
"""The statement's three runs, in the order of `DirectReads.samples`."""


@dataclass(frozen=True)
class Shard:
    """Where one table's rows of the tenant are: its shard's qualified name and the worker's address."""

    name: str
    host: str
    port: int


def shards(conn: psycopg.Connection[Any], schema: str, tables: set[str], dataset: str) -> dict[str, Shard]:
    """The tenant's shard of each of `tables` (distributed by dataset), from the coordinator's metadata."""
    out = {}
    for table in sorted(tables):
        relation = sql.Identifier(schema, table).as_string(conn)
        row = conn.execute(
            """SELECT shard_name(%(t)s::regclass, s.shardid), s.nodename, s.nodeport
               FROM citus_shards s
               WHERE s.shardid = get_shard_id_for_distribution_column(%(t)s::regclass, %(d)s::text)""",
            {"t": relation, "d": dataset},
        ).fetchone()
        assert row is not None, f"no shard of {relation} for {dataset}"
        out[table] = Shard(*row)
    return out


def on_shards(text: bytes, schema: str, where: dict[str, Shard]) -> bytes:
    """`text` with each `"schema".table` replaced by the tenant's shard of it."""
    pattern = re.compile(rb'"' + re.escape(schema.encode()) + rb'"\.(\w+)')
    return pattern.sub(lambda m: where[m.group(1).decode()].name.encode(), text)


@dataclass
class DirectReads:
    """The three runs of the latest Citus recall's statement, timed; see the module docstring."""

    one: Memory
    citus: Memory
    scope: Scope
    seen: dict[str, Any]
    """The latest recall's `plan` and `params` (`direct_reads`)."""
    stack: ExitStack
    samples: dict[str, list[float]] = field(default_factory=lambda: {form: [] for form in FORMS})
    _conns: tuple[psycopg.Connection[Any], ...] = ()
    _where: dict[str, Shard] = field(default_factory=dict)

    def run(self, *, timed: bool) -> None:
        """The statement of the recall just made, run each way (its rows fetched), the times kept if
        `timed`; the coordinator's rows and the worker's must be the same."""
        plan, named = self.seen["plan"], ScopeAccess(named=self.scope)
        schema = self.citus.info.schema
        statement = kept_hits_statement(schema, plan, named)
        params = statement.bind(self.seen["params"])
        if not self._conns:
            self._open(schema, statement.query)
        texts = (
            kept_hits_statement(self.one.info.schema, plan, named).query,
            statement.query,
            on_shards(statement.query, schema, self._where),
        )
        rows = []
        for form, conn, text in zip(FORMS, self._conns, texts, strict=True):
            with psycopg.RawCursor(conn) as cur:
                started = time.perf_counter()
                cur.execute(text, params, prepare=True)
                rows.append(cur.fetchall())
                if timed:
                    self.samples[form].append((time.perf_counter() - started) * 1000)
        if sorted(map(repr, rows[1])) != sorted(map(repr, rows[2])):
            raise AssertionError("the coordinator and the worker's shards returned different rows")

    def _open(self, schema: str, text: bytes) -> None:
        coordinator = self.stack.enter_context(connect(self.citus.dsn))
        tables = {m.decode() for m in re.findall(rb'"' + re.escape(schema.encode()) + rb'"\.(\w+)', text)}
        self._where = shards(coordinator, schema, tables, self.scope.dataset)
        (address,) = {(s.host, s.port) for s in self._where.values()}  # colocated: one worker holds them all
        worker = self.stack.enter_context(connect(make_conninfo(self.citus.dsn, host=address[0], port=address[1])))
        self._conns = (self.stack.enter_context(connect(self.one.dsn)), coordinator, worker)


@contextmanager
def direct_reads(one: Memory, citus: Memory, scope: Scope) -> Iterator[DirectReads]:
    """`DirectReads` of `scope` in the two stores; every recall's plan and parameters are captured
    while the block runs (the statement is rebuilt from them)."""
    with ExitStack() as stack:
        seen = stack.enter_context(captured_recalls())
        yield DirectReads(one, citus, scope, seen, stack)
