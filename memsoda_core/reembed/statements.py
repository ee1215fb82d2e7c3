"""SQL of a re-embed: the next vector column, its batches and their keyset cursor, the next
indexes, and the switch that makes the next column the store's (pure builders).

Every vector lives in one column, `embedding`, of `TABLES`. A re-embed adds `NEXT` beside it (of
the new dimension, NULL until a row is re-embedded: the per-row marker), fills it in keyset order
of the primary key, builds the next HNSW indexes concurrently, then swaps the columns in one
transaction: the old column goes (its indexes with it), `NEXT` takes its name, the next indexes
take the old indexes' names, and meta records the new model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from psycopg import sql

from memsoda_core.store import layout as sql_layout
from memsoda_core.store.template import schema_sql
from memsoda_core.store.tenant_index import TenantIndex
from memsoda_core.text import fact_embedding_text

TABLES = ("entities", "facts", "episodes")
"""The tables holding vectors, in the order a pass re-embeds them (entities first: a fact's text
needs its anchor's name, read by join, not its vector)."""

COLUMN = "embedding"
NEXT = "embedding_next"
"""The column a re-embed fills; NULL marks a row still to do."""

STATE_KEY = "reembed"
"""Meta key of a re-embed in progress: its model, dimension and keyset cursor (`ReembedState`)."""

NEXT_SUFFIX = "_next"
"""A next index is named like the index it replaces, with this suffix, until the switch."""

EPISODE_INDEX = TenantIndex("episodes_embedding_hnsw", "episodes", "hnsw", f"{COLUMN} vector_cosine_ops")
"""The one vector index shared by every scope (schema v1): episodes are few per scope."""

SWITCH_LOCK_TIMEOUT = "5s"
"""How long the switch waits for the writers in flight (and then the readers) before it gives up,
rolled back whole; the re-embed tries it again (`operation.SWITCH_ATTEMPTS`)."""


@dataclass(frozen=True, kw_only=True)
class Cursor:
    """Where a pass stands: the last row done, by table and primary key."""

    table: str = TABLES[0]
    dataset: str = ""
    project: str = ""
    id: int = 0


@dataclass(frozen=True, kw_only=True)
class PendingRow:
    """A row of `pending_statement`: its key and the text its vector is made of (a fact: the
    anchor-enriched text the write path embeds, `text.fact_embedding_text`)."""

    dataset: str
    project: str
    id: int
    text: str
    predicate: str | None = None
    object: str | None = None
    anchor: str | None = None

    @property
    def embedding_text(self) -> str:
        if self.anchor is None:
            return self.text
        return fact_embedding_text(self.text, self.predicate or "", self.object or "", self.anchor)


def add_next_statement(schema: str, table: str, dimensions: int) -> sql.Composed:
    """The next vector column of `table` (on a partitioned table, of every partition)."""
    return schema_sql(
        "ALTER TABLE {s}.{t} ADD COLUMN IF NOT EXISTS {n} vector({d})",
        schema,
        t=sql.Identifier(table),
        n=sql.Identifier(NEXT),
        d=sql.Literal(dimensions),
    )


def drop_next_statement(schema: str, table: str) -> sql.Composed:
    """Drop `table`'s next column (an abandoned re-embed), its indexes with it."""
    return schema_sql(
        "ALTER TABLE {s}.{t} DROP COLUMN IF EXISTS {n}", schema, t=sql.Identifier(table), n=sql.Identifier(NEXT)
    )


_TEXTS = {
    "entities": "SELECT r.dataset, r.project, r.id, r.name AS text FROM {s}.entities r",
    "episodes": "SELECT r.dataset, r.project, r.id, r.text FROM {s}.episodes r",
    "facts": """SELECT r.dataset, r.project, r.id, r.subject AS text, r.predicate, r.object, a.name AS anchor
                FROM {s}.facts r
                JOIN {s}.entities a ON a.dataset = r.dataset AND a.project = r.project AND a.id = r.anchor_id""",
}


def pending_statement(schema: str, table: str) -> sql.Composed:
    """`PendingRow`s of `table` still to do after the key (%(dataset)s, %(project)s, %(id)s), in
    key order, at most %(limit)s: a walk of the primary key that never reads a row twice."""
    return schema_sql(
        _TEXTS[table]
        + """ WHERE (r.dataset, r.project, r.id) > (%(dataset)s, %(project)s, %(id)s) AND r.{n} IS NULL
              ORDER BY r.dataset, r.project, r.id
              LIMIT %(limit)s""",
        schema,
        n=sql.Identifier(NEXT),
    )


def count_pending_statement(schema: str) -> sql.Composed:
    """How many rows of every table are still to do (one number)."""
    counts = sql.SQL(" + ").join(
        schema_sql(
            "(SELECT count(*) FROM {s}.{t} WHERE {n} IS NULL)", schema, t=sql.Identifier(t), n=sql.Identifier(NEXT)
        )
        for t in TABLES
    )
    return sql.SQL("SELECT {} AS pending").format(counts)


def fill_statement(schema: str, table: str) -> sql.Composed:
    """Set the next vectors of one dataset's rows, %(dataset)s with (%(projects)s, %(ids)s) ->
    %(embeddings)s, where still NULL: one dataset per statement, the form Citus routes to one
    shard."""
    return schema_sql(
        """UPDATE {s}.{t} r SET {n} = u.embedding
           FROM unnest(%(projects)b::text[], %(ids)b::bigint[], %(embeddings)b::vector[]) AS u(project, id, embedding)
           WHERE r.dataset = %(dataset)s AND r.project = u.project AND r.id = u.id AND r.{n} IS NULL""",
        schema,
        t=sql.Identifier(table),
        n=sql.Identifier(NEXT),
    )


def state_statement(schema: str, *, lock: bool = False) -> sql.Composed:
    """The state row's value (`STATE_KEY`), locked until the transaction ends with `lock`: every
    batch takes it, so two re-embeds of one store take turns and each sees the other's target."""
    return schema_sql(
        "SELECT value FROM {s}.meta WHERE key = {k}{lock}",
        schema,
        k=sql.Literal(STATE_KEY),
        lock=sql.SQL(" FOR UPDATE" if lock else ""),
    )


def delete_state_statement(schema: str) -> sql.Composed:
    return schema_sql("DELETE FROM {s}.meta WHERE key = {k}", schema, k=sql.Literal(STATE_KEY))


def next_index(index: TenantIndex) -> TenantIndex:
    """The index over the next column that takes `index`'s place at the switch."""
    column = index.column.replace(COLUMN, NEXT, 1)
    return TenantIndex(index.name + NEXT_SUFFIX, index.table, index.method, column)


def valid_indexes_statement() -> sql.Composed:
    """Which of %(names)s are valid indexes in schema %(schema)s."""
    return sql.SQL(
        """SELECT c.relname FROM pg_class c
           JOIN pg_namespace ns ON ns.oid = c.relnamespace
           JOIN pg_index i ON i.indexrelid = c.oid
           WHERE ns.nspname = %(schema)s AND c.relname = ANY(%(names)b::text[]) AND i.indisvalid
           ORDER BY c.relname"""
    ).format()


def lock_tables_statement(schema: str) -> sql.Composed:
    """Writers wait (SHARE conflicts with their ROW EXCLUSIVE), readers go on, until the switch
    commits: no row can be written between the last catch-up and the swap."""
    tables = sql.SQL(", ").join(sql.Identifier(schema, t) for t in TABLES)
    return sql.SQL("LOCK TABLE {} IN SHARE MODE").format(tables)


def exclusive_statements(schema: str) -> list[sql.Composed]:
    """The swap's ACCESS EXCLUSIVE locks, all at once, before any DDL: the switch's deadlock check
    runs first (`store.layout.MOVE_DEADLOCK_TIMEOUT`, or without the privilege a short lock wait),
    so in a wait cycle with a recall, which locks its tables one by one, the switch is the one that
    rolls back (and is tried again), never the recall."""
    tables = sql.SQL(", ").join(sql.Identifier(schema, t) for t in TABLES)
    return [
        sql.SQL(
            """SELECT CASE WHEN has_parameter_privilege('deadlock_timeout', 'SET')
                           THEN set_config('deadlock_timeout', {deadlock}, true)
                           ELSE set_config('lock_timeout', {fallback}, true) END"""
        ).format(
            deadlock=sql.Literal(sql_layout.MOVE_DEADLOCK_TIMEOUT),
            fallback=sql.Literal(sql_layout.EXCLUSIVE_LOCK_TIMEOUT),
        ),
        sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(tables),
    ]


def lock_timeout_statement() -> sql.Composed:
    return sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(SWITCH_LOCK_TIMEOUT))


def swap_statements(schema: str, renamed: Sequence[str]) -> list[sql.Composed]:
    """The swap: each table's old column dropped (its indexes with it; the space it held is
    reused as rows are rewritten), the next one renamed to it and made NOT NULL, and each next
    index in `renamed` given its old index's name."""
    out: list[sql.Composed] = []
    for table in TABLES:
        t, old, new = sql.Identifier(table), sql.Identifier(COLUMN), sql.Identifier(NEXT)
        out.append(schema_sql("ALTER TABLE {s}.{t} DROP COLUMN {old}", schema, t=t, old=old))
        out.append(schema_sql("ALTER TABLE {s}.{t} RENAME COLUMN {new} TO {old}", schema, t=t, new=new, old=old))
        out.append(schema_sql("ALTER TABLE {s}.{t} ALTER COLUMN {old} SET NOT NULL", schema, t=t, old=old))
    for name in renamed:
        out.append(
            schema_sql(
                "ALTER INDEX {s}.{n} RENAME TO {old}",
                schema,
                n=sql.Identifier(name),
                old=sql.Identifier(name.removesuffix(NEXT_SUFFIX)),
            )
        )
    return out
