"""SQL builders of the write path (`writing.operation`): the entities a write reads and locks, the
scope's row, the statistics check, and episodes (the inserts of entities, facts, links, counts and
sources are `writing.inserts`). Pure: each returns a `sql.Composed`;
values are always bound."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from memsoda_core.store.statements import tenant_statement

# --- entities -------------------------------------------------------------------------------------


def known_entities(schema: str, *, lock: bool = False) -> sql.Composed:
    """(name, id) of those of %(names)s the scope already has. With `lock`, they are locked FOR KEY
    SHARE until the write commits: a concurrent `forget` cannot delete them in between (other
    writers are not blocked), so their stored name embeddings can be reused instead of embedding
    the names again."""
    return tenant_statement(
        """SELECT name, id FROM {s}.entities
           WHERE {tenant} AND name = ANY(%(names)b::text[])
           ORDER BY name{lock}""",
        schema,
        lock=sql.SQL(" FOR KEY SHARE" if lock else ""),
    )


def bump_entities(schema: str) -> sql.Composed:
    """`inserts.BUMP_ENTITIES` in the ARRAYS form: add %(touches)s facts to the counts of the
    scope's entities %(names)s (sorted) and keep a specific type of %(types)s over OTHER
    (`counts.keep_specific_type`'s rule). Every one of them exists: created at the start of the
    write (`inserts.ENTITIES`) or locked FOR KEY SHARE
    since, so no `forget` removed it.

    An upsert that always conflicts rather than an UPDATE: INSERT ... SELECT takes the rows in the
    order given, so two writers wait for each other instead of deadlocking, which an UPDATE's join
    does not promise. The proposed row copies the stored embedding because NOT NULL is checked
    before ON CONFLICT resolves. A write runs this at its end (`counts.bump_counts`), so it
    holds the rows only until it commits."""
    return tenant_statement(
        """INSERT INTO {s}.entities AS e (dataset, project, name, type, embedding, fact_count)
           SELECT %(dataset)s, %(project)s, u.name, u.type,
                  (SELECT k.embedding FROM {s}.entities k WHERE {tenant_k} AND k.name = u.name),
                  u.touches
           FROM unnest(%(names)b::text[], %(types)b::text[], %(touches)b::int[]) AS u(name, type, touches)
           ON CONFLICT (dataset, project, name) DO UPDATE
           SET type = CASE WHEN e.type = 'OTHER' THEN EXCLUDED.type ELSE e.type END,
               fact_count = e.fact_count + EXCLUDED.fact_count""",
        schema,
    )


# --- facts, links, the scope ----------------------------------------------------------------------


@dataclass(frozen=True)
class InsertedFact:
    """A row of `inserts.FACTS`."""

    id: int
    lexemes: list[str]
    """Its lexemes (`lexemes.fact_lexemes`), for `inserts.LEXEMES`."""


def bump_scope(schema: str) -> sql.Composed:
    """Add `delta` to the scope's fact count, creating the scope row on its first write; returns
    the count after it (the row is locked until commit, so no other write changes it before)."""
    return tenant_statement(
        """INSERT INTO {s}.scopes AS sc (dataset, project, fact_count)
           VALUES (%(dataset)s, %(project)s, %(delta)s)
           ON CONFLICT (dataset, project) DO UPDATE SET fact_count = sc.fact_count + EXCLUDED.fact_count
           RETURNING sc.fact_count""",
        schema,
    )


def ensure_scope(schema: str) -> sql.Composed:
    return tenant_statement(
        """INSERT INTO {s}.scopes (dataset, project) VALUES (%(dataset)s, %(project)s)
           ON CONFLICT (dataset, project) DO NOTHING""",
        schema,
    )


@dataclass(frozen=True)
class TablePages:
    """The row of `facts_pages`."""

    analyzed: int
    """Pages of the facts table at its last ANALYZE."""
    current: int


def facts_pages() -> sql.Composed:
    """`TablePages` of table %(table)s of schema %(schema)s (facts, or on a partitioned store its
    DEFAULT partition, where the small tenants grow)."""
    return sql.SQL(
        """SELECT c.relpages AS analyzed, pg_relation_size(c.oid) / current_setting('block_size')::int AS current
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %(schema)s AND c.relname = %(table)s"""
    ).format()


# --- episodes -------------------------------------------------------------------------------------


def insert_episodes(schema: str) -> sql.Composed:
    return tenant_statement(
        """INSERT INTO {s}.episodes (dataset, project, thread_id, text, created_at, embedding)
           SELECT %(dataset)s, %(project)s, u.thread_id, u.text, u.created_at, u.embedding
           FROM unnest(%(thread_ids)b::text[], %(texts)b::text[], %(created_ats)b::timestamptz[],
                       %(embeddings)b::vector[]) WITH ORDINALITY AS u(thread_id, text, created_at, embedding, ord)
           ORDER BY u.ord
           RETURNING id""",
        schema,
    )


def clear_item_owned(schema: str) -> sql.Composed:
    """Facts %(ids)s are no longer items' own: the application wrote them too (an import's line)."""
    return tenant_statement(
        "UPDATE {s}.facts SET item_owned = false WHERE {tenant} AND id = ANY(%(ids)b::bigint[]) AND item_owned",
        schema,
    )


def lock_imported_episodes() -> sql.Composed:
    """Until the transaction ends, the lock of the scope's imported episodes: two imports into one
    scope take turns, so each sees the episodes the other wrote (`stored_episodes`) and none is
    written twice."""
    return sql.SQL(
        """SELECT pg_advisory_xact_lock(hashtext(concat_ws(
                      chr(31), 'episodes', %(schema)s::text, %(dataset)s::text, %(project)s::text)))"""
    ).format()


@dataclass(frozen=True)
class StoredEpisode:
    """A row of `stored_episodes`: the 1-based position of a given episode the scope holds."""

    position: int


def stored_episodes(schema: str) -> sql.Composed:
    """Which of the episodes given (%(thread_ids)s, %(texts)s, %(created_ats)s, %(dated)s) the
    scope holds already: one of the same thread and text, created at the same time, or at any
    time for one given without a time (%(dated)s false: it was stamped with the import's time)."""
    return tenant_statement(
        """SELECT u.position FROM unnest(%(thread_ids)b::text[], %(texts)b::text[],
                                         %(created_ats)b::timestamptz[], %(dated)b::boolean[])
                                  WITH ORDINALITY AS u(thread_id, text, created_at, dated, position)
           WHERE EXISTS (SELECT 1 FROM {s}.episodes e
                         WHERE {tenant_e} AND e.text = u.text AND e.thread_id IS NOT DISTINCT FROM u.thread_id
                           AND (e.created_at = u.created_at OR NOT u.dated))
           ORDER BY u.position""",
        schema,
    )
