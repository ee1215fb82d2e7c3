"""A re-embed's operations: start (or resume), read a batch, write a batch with its cursor, build
the next indexes, and the switch. The driver (`reembed.async_methods`) runs them on a runner whose
embedder is the new one, so every `EmbedDocuments` is checked against the new dimension.

Resumable: a batch's vectors and the cursor after it commit together (`write_batch`), and NULL in
the next column marks a row still to do, so a re-embed killed at any point restarts at the first
row it had not committed and embeds no committed row again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import groupby

from memsoda_core.checks import CONFIGURATION, check_int
from memsoda_core.embedders.protocol import Vector
from memsoda_core.errors import ConfigurationError, LayoutChangedError, StoreBusyError
from memsoda_core.layouts.ddl import index_ddl
from memsoda_core.layouts.generation import current_generation
from memsoda_core.ops.opening import check_index_dimensions, read_meta
from memsoda_core.reembed import statements as sql_reembed
from memsoda_core.reembed.statements import Cursor, PendingRow
from memsoda_core.runner.steps import Operation, embed_documents, execute, execute_as
from memsoda_core.store import layout as sql_layout
from memsoda_core.store import placement as sql_placement
from memsoda_core.store import schema as ddl
from memsoda_core.store import tenant_index as sql_tenant_index
from memsoda_core.store.info import StoreInfo
from memsoda_core.store.params import BigintArray, TextArray
from memsoda_core.store.tenant_index import TenantIndex
from memsoda_core.validation import Scope

DEFAULT_BATCH_SIZE = 256
"""Rows per batch: one embedding call and one transaction each."""

MAX_BATCH_SIZE = 10_000

SWITCH_ATTEMPTS = 5
"""A switch that gave up a lock wait (`statements.SWITCH_LOCK_TIMEOUT`, `statements.exclusive_statements`)
is tried again, after another catch-up pass, this many times in all."""


@dataclass(frozen=True, kw_only=True)
class ReembedState:
    """The state row of a re-embed in progress (meta `statements.STATE_KEY`, JSON)."""

    model: str
    dimensions: int
    cursor: Cursor = field(default_factory=Cursor)

    def dumps(self) -> str:
        return json.dumps({"model": self.model, "dimensions": self.dimensions, "cursor": asdict(self.cursor)})

    @classmethod
    def loads(cls, text: str) -> ReembedState:
        raw = json.loads(text)
        return cls(model=raw["model"], dimensions=int(raw["dimensions"]), cursor=Cursor(**raw["cursor"]))


@dataclass(frozen=True, kw_only=True)
class ReembedReport:
    """What `Memory.reembed` did."""

    model: str
    dimensions: int
    switched: bool
    """The store now holds the new model's vectors (False: it already did, nothing was done)."""
    resumed: bool = False
    """It went on from an earlier run that stopped (a crash, a kill, an error)."""
    embedded: int = 0
    """Rows embedded in this call's main pass (entity names, facts, episodes)."""
    caught_up: int = 0
    """Rows written during the run, embedded by the catch-up passes before the switch."""
    indexes: list[str] = field(default_factory=list)
    """The vector indexes built over the new vectors (under their final names)."""


def check_reembed_args(model: str, dimensions: int, batch_size: int) -> None:
    check_int(batch_size, "batch_size", low=1, high=MAX_BATCH_SIZE, errors=CONFIGURATION)
    check_index_dimensions(model, dimensions)


def _exclusive(info: StoreInfo) -> Operation[None]:
    """Lock the vector tables for DDL, all at once, the switch's way (`statements.exclusive_statements`)."""
    for statement in sql_reembed.exclusive_statements(info.schema):
        yield from execute(statement)


def _add_next(info: StoreInfo, dimensions: int) -> Operation[None]:
    yield from _exclusive(info)
    for table in sql_reembed.TABLES:
        yield from execute(sql_reembed.add_next_statement(info.schema, table, dimensions))


def _drop_next(info: StoreInfo) -> Operation[None]:
    yield from _exclusive(info)
    for table in sql_reembed.TABLES:
        yield from execute(sql_reembed.drop_next_statement(info.schema, table))


def start(info: StoreInfo, model: str, dimensions: int) -> Operation[tuple[ReembedState | None, bool]]:
    """(the state, resumed): the earlier run's state when it re-embeds to the same model, else a new
    one with the next columns added (an earlier run to another model is abandoned: its columns
    dropped); (None, False) when the store already holds `model`'s vectors and no run is pending."""
    yield from execute(sql_reembed.lock_timeout_statement())
    rows = yield from execute(sql_reembed.state_statement(info.schema, lock=True))
    if rows:
        earlier = ReembedState.loads(str(rows[0][0]))
        if (earlier.model, earlier.dimensions) == (model, dimensions):
            return earlier, True
        yield from _drop_next(info)
    else:
        meta = yield from read_meta(info.schema)
        if (meta["model"], int(meta["dimensions"])) == (model, dimensions):
            return None, False
    state = ReembedState(model=model, dimensions=dimensions)
    yield from _add_next(info, dimensions)
    yield from execute(ddl.write_meta_statement(info.schema), (sql_reembed.STATE_KEY, state.dumps()))
    return state, False


def abandon(info: StoreInfo) -> Operation[bool]:
    """Drop a re-embed in progress (its next columns and indexes, its state); False if none was."""
    yield from execute(sql_reembed.lock_timeout_statement())
    rows = yield from execute(sql_reembed.state_statement(info.schema, lock=True))
    if not rows:
        return False
    yield from _drop_next(info)
    yield from execute(sql_reembed.delete_state_statement(info.schema))
    return True


def count_pending(info: StoreInfo) -> Operation[int]:
    rows = yield from execute(sql_reembed.count_pending_statement(info.schema))
    return int(rows[0][0])


def read_pending(info: StoreInfo, cursor: Cursor, limit: int) -> Operation[tuple[Cursor, list[PendingRow]]]:
    """The next rows still to do after `cursor`, of its table or the following ones: (the cursor at
    the start of the table they are in, its rows); no rows at the end of the pass."""
    tables = sql_reembed.TABLES
    for table in tables[tables.index(cursor.table) :]:
        if table != cursor.table:
            cursor = Cursor(table=table)
        rows = yield from execute_as(
            PendingRow,
            sql_reembed.pending_statement(info.schema, table),
            {"dataset": cursor.dataset, "project": cursor.project, "id": cursor.id, "limit": limit},
        )
        if rows:
            return cursor, rows
    return cursor, []


def _check_state(info: StoreInfo, state: ReembedState) -> Operation[None]:
    """Lock the state row and check it is still this run's (not abandoned, not another model's)."""
    rows = yield from execute(sql_reembed.state_statement(info.schema, lock=True))
    current = ReembedState.loads(str(rows[0][0])) if rows else None
    if current is None or (current.model, current.dimensions) != (state.model, state.dimensions):
        now = "none is" if current is None else f"one to {current.model!r} ({current.dimensions} dimensions) is"
        raise ConfigurationError(
            f"the re-embed to {state.model!r} was abandoned and {now} in progress: run reembed again"
        )


def _fill(info: StoreInfo, table: str, rows: Sequence[PendingRow]) -> Operation[None]:
    """Embed `rows` with the runner's (new) embedder and store their next vectors."""
    vectors = yield from embed_documents([row.embedding_text for row in rows])
    yield from _store(info, table, rows, vectors)


def _store(info: StoreInfo, table: str, rows: Sequence[PendingRow], vectors: Sequence[Vector]) -> Operation[None]:
    pairs = sorted(zip(rows, vectors, strict=True), key=lambda pair: pair[0].dataset)
    for dataset, group in groupby(pairs, key=lambda pair: pair[0].dataset):
        chunk = list(group)
        yield from execute(
            sql_reembed.fill_statement(info.schema, table),
            {
                "dataset": dataset,
                "projects": TextArray(row.project for row, _ in chunk),
                "ids": BigintArray(row.id for row, _ in chunk),
                "embeddings": [vector for _, vector in chunk],
            },
        )


def write_batch(
    info: StoreInfo, state: ReembedState, cursor: Cursor, rows: Sequence[PendingRow], *, persist: bool
) -> Operation[Cursor]:
    """Embed one batch read by `read_pending` (no connection is held meanwhile: the embedding comes
    before the first statement), then in one transaction store its vectors and, with `persist`,
    the cursor after it. Returns that cursor."""
    last = rows[-1]
    after = Cursor(table=cursor.table, dataset=last.dataset, project=last.project, id=last.id)
    vectors = yield from embed_documents([row.embedding_text for row in rows])
    yield from _check_state(info, state)
    yield from _store(info, cursor.table, rows, vectors)
    if persist:
        moved = ReembedState(model=state.model, dimensions=state.dimensions, cursor=after)
        yield from execute(ddl.write_meta_statement(info.schema), (sql_reembed.STATE_KEY, moved.dumps()))
    return after


@dataclass(frozen=True)
class ReplacedIndex:
    """A vector index over the old column that the new column gets too."""

    index: TenantIndex
    scope: Scope | None
    """The scope of a partial index (plain layout); None for a leaf's index or the episodes'."""


def _replaced_indexes(info: StoreInfo) -> Operation[list[ReplacedIndex]]:
    """The valid vector indexes over the old column: each large scope's own (partial indexes, or
    its leaves' on a partitioned store) and the episodes'."""
    large = yield from execute_as(
        Scope, sql_tenant_index.large_scopes_statement(info.schema), {"min_facts": info.tenant_index_min_facts}
    )
    moved = yield from execute_as(Scope, sql_placement.moved_scopes_statement(info.schema))
    candidates = {sql_reembed.EPISODE_INDEX.name: ReplacedIndex(sql_reembed.EPISODE_INDEX, None)}
    for scope in dict.fromkeys([*moved, *large]):
        for index in sql_tenant_index.tenant_indexes(scope):
            candidates[index.name] = ReplacedIndex(index, scope)
        for index in sql_layout.leaf_indexes(scope):
            candidates[index.name] = ReplacedIndex(index, None)
    rows = yield from execute(
        sql_reembed.valid_indexes_statement(),
        {"schema": info.schema, "names": TextArray(n for n, c in candidates.items() if c.index.method == "hnsw")},
    )
    return [candidates[str(name)] for (name,) in rows]


def build_next_indexes(info: StoreInfo) -> Operation[list[str]]:
    """Build, concurrently and outside any transaction, the next column's counterpart of every
    vector index the old column has (`_replaced_indexes`); returns their names. Raises
    StoreBusyError when one could not be built (a lock timeout, most likely): a switch without it
    would leave recall without that index, and running the re-embed again resumes here."""
    replaced = yield from _replaced_indexes(info)
    following = [sql_reembed.next_index(r.index) for r in replaced]
    steps = [
        sql_layout.create_leaf_index(info.schema, index)
        if r.scope is None
        else sql_tenant_index.create_statement(info.schema, r.scope, index)
        for r, index in zip(replaced, following, strict=True)
    ]
    yield from index_ddl(steps)
    names = [index.name for index in following]
    valid = yield from execute(
        sql_reembed.valid_indexes_statement(), {"schema": info.schema, "names": TextArray(names)}
    )
    built = sorted(str(name) for (name,) in valid)
    missing = [index for index in following if index.name not in built]
    if missing:
        # an invalid index left by a failed build would stay invalid: the next try builds it afresh
        yield from index_ddl([sql_tenant_index.drop_statement(info.schema, index) for index in missing])
        raise StoreBusyError(
            f"the index(es) {', '.join(i.name for i in missing)} over the new vectors could not be built "
            "(see the log); run reembed again: it resumes with the indexes",
            sqlstate="55P03",
            retry_safe=True,
        )
    return built


def switch(info: StoreInfo, state: ReembedState, renamed: Sequence[str], batch_size: int) -> Operation[int]:
    """The switch, one transaction: writers wait (a SHARE lock on the vector tables), the rows
    written since the last pass are embedded, then the columns swap, the next indexes take the old
    ones' names and meta records the new model. Returns how many rows it embedded. Raises
    LayoutChangedError, having changed nothing, when the store's layout is no longer `info`'s."""
    yield from execute(sql_reembed.lock_timeout_statement())
    yield from _check_state(info, state)
    yield from execute(sql_reembed.lock_tables_statement(info.schema))
    # the layout is read after the lock: a change committed before it would leave this run's
    # statements and next indexes those of the old layout
    if (yield from current_generation(info.schema)) != info.layout_generation:
        raise LayoutChangedError(
            f"the layout of schema {info.schema!r} changed during the re-embed: run it again (it resumes)"
        )
    caught = 0
    cursor = Cursor()
    while True:
        cursor, rows = yield from read_pending(info, cursor, batch_size)
        if not rows:
            break
        yield from _fill(info, cursor.table, rows)
        caught += len(rows)
        last = rows[-1]
        cursor = Cursor(table=cursor.table, dataset=last.dataset, project=last.project, id=last.id)
    yield from _exclusive(info)
    for statement in sql_reembed.swap_statements(info.schema, renamed):
        yield from execute(statement)
    yield from execute(ddl.write_meta_statement(info.schema), ("model", state.model))
    yield from execute(ddl.write_meta_statement(info.schema), ("dimensions", str(state.dimensions)))
    yield from execute(sql_reembed.delete_state_statement(info.schema))
    return caught
