"""`python -m bench citus --shard-direct`: a small tenant's recall statement alone, three ways.

Citus sends each task to its worker unnamed, so the worker parses and plans the statement at every
call; one node keeps the plan of a prepared statement, and so does a worker read directly. Here the
statement of each Citus recall runs three ways right after that recall: prepared on one node;
prepared through the coordinator, the tenant named (memsoda's form with `worker_reads=False`, or
when the worker cannot be reached); and prepared on a connection to the worker holding the
tenant's shards, naming them, with the tenant bound and the placement guard (memsoda's default,
`layouts.shards`). The rows of the last two must be the same.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from bench.capture import captured_recalls
from bench.common import connect
from memsoda_core import Memory
from memsoda_core.layouts.access import ScopeAccess
from memsoda_core.layouts.shards import PlacementRow, ShardPlace, place_from, place_params, place_statement
from memsoda_core.recall.statements import kept_hits_statement
from memsoda_core.validation import Scope

FORMS = (
    "one node, plan kept",
    "through the coordinator, plan kept (worker_reads=False)",
    "on the worker's shards, plan kept (memsoda's default)",
)
"""The statement's three runs, in the order of `DirectReads.samples`."""


def shard_place(conn: psycopg.Connection[Any], schema: str, dataset: str) -> ShardPlace:
    """Where the tenant's shards are, as memsoda reads it (`layouts.shards`)."""
    with conn.cursor(row_factory=psycopg.rows.class_row(PlacementRow)) as cur:
        rows = cur.execute(place_statement(schema), place_params(dataset)).fetchall()
    place = place_from(rows)
    assert place is not None, f"{dataset}'s shards are not on one worker"
    return place


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
    _place: ShardPlace | None = None

    def run(self, *, timed: bool) -> None:
        """The statement of the recall just made, run each way (its rows fetched), the times kept if
        `timed`; the coordinator's rows and the worker's must be the same."""
        plan, named = self.seen["plan"], ScopeAccess(named=self.scope)
        schema = self.citus.info.schema
        if not self._conns:
            self._open(schema)
        assert self._place is not None
        statements = (
            kept_hits_statement(self.one.info.schema, plan, named),
            kept_hits_statement(schema, plan, named),
            kept_hits_statement(schema, plan, ScopeAccess(shards=self._place)),
        )
        rows = []
        for form, conn, statement in zip(FORMS, self._conns, statements, strict=True):
            params = statement.bind(self.seen["params"])
            with psycopg.RawCursor(conn) as cur:
                started = time.perf_counter()
                cur.execute(statement.query, params, prepare=True)
                rows.append(cur.fetchall())
                if timed:
                    self.samples[form].append((time.perf_counter() - started) * 1000)
        if sorted(map(repr, rows[1])) != sorted(map(repr, rows[2])):
            raise AssertionError("the coordinator and the worker's shards returned different rows")

    def _open(self, schema: str) -> None:
        coordinator = self.stack.enter_context(connect(self.citus.dsn))
        self._place = place = shard_place(coordinator, schema, self.scope.dataset)
        worker = self.stack.enter_context(connect(make_conninfo(self.citus.dsn, host=place.host, port=place.port)))
        self._conns = (self.stack.enter_context(connect(self.one.dsn)), coordinator, worker)


@contextmanager
def direct_reads(one: Memory, citus: Memory, scope: Scope) -> Iterator[DirectReads]:
    """`DirectReads` of `scope` in the two stores; every recall's plan and parameters are captured
    while the block runs (the statement is rebuilt from them)."""
    with ExitStack() as stack:
        seen = stack.enter_context(captured_recalls())
        yield DirectReads(one, citus, scope, seen, stack)
