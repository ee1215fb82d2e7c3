"""SQL builders of reconciling writes: the per-relation locks, the live facts a batch meets, ending
and merging facts, one fact's state and its chain, the registry of single-valued predicates. Pure:
each returns a `sql.Composed`; values are always bound.

A relation is (scope, subject, case-folded predicate); a fact's value is its case-folded object.

The lock order of every operation that changes a scope's facts, entities, lexemes or scope row
(writes, imports, supersede, invalidate, remember, items, forget), so no two wait in a cycle:
1. on a partitioned store, the dataset's move lock, shared (`store.layout.dataset_lock`), alone;
2. the reconciliation locks (`lock_relations`, ascending, in one statement; `lock_scope` takes all
   of them: forget), then the items' locks (`items.statements.lock_items`);
3. rows: entities FOR KEY SHARE and new entities, facts and links, the facts a write ends or merges;
4. the counts, last: entities by name, lexemes in order, then the scope's row.
`forget` holds every lock of step 2, so no writer is in steps 3-4 of the scope while it changes
those rows (its own order: facts and links, entity counts, lexemes, orphan entities, the scope).
One exception: `put_items` takes a relation's lock again, after the items' locks, for an item
another writer changed in between; a deadlock that closes is run again by the runner
(`runner.policy.RERUN_SQLSTATES`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from psycopg import sql

from memsoda_core.store.fact_columns import UNKNOWN_START
from memsoda_core.store.statements import tenant_statement
from memsoda_core.writing.inserts import fact_unnest

KEY_FIELDS = ("subject", "predicate", "object")
"""The fields of a fact its locks are taken on (`lock_relations`), bound as `inserts.FACTS` binds
them (`inserts.fact_arrays`)."""

MET_FIELDS = (*KEY_FIELDS, "valid_at", "invalid_at")
"""The fields of a batch's facts `met_facts` compares with the stored ones, bound as
`inserts.FACTS` binds them."""

LOCK_BUCKETS = 512
"""Keys are hashed into this many advisory locks per scope, so that an import, which takes the
locks of all its facts before its first row, holds at most this many (PostgreSQL's lock table is
shared and bounded); two keys in one bucket only make their writers take turns."""


def lock_relations(schema: str) -> sql.Composed:
    """Take, until the transaction ends, the advisory locks of the facts (%(subjects)s,
    %(predicates)s, %(objects)s), in ascending order: a fact's value (subject, predicate, object),
    and for a single-valued relation (%(singles)s, or the scope's registry) the relation (subject,
    predicate) as well. Every write holds them from before it reads the facts it may meet to its
    commit, so two writers of one value or of one single-valued relation take turns (no duplicate,
    exactly one live value), and taking them first and in one order means no wait cycle.

    Returns a `Locked`: `learned_at` is read once every lock is held, so the writes of one value or
    relation are learned in the order they take turns (transaction time; see `Locked`), and the
    inputs whose relation it locked (by the registry as this statement's snapshot saw it: one a
    `set_single_valued` committed while it waited is not among them, `late_relations`)."""
    return tenant_statement(
        """SELECT count(pg_advisory_xact_lock(k.scope_key, k.bucket)::text) AS locks,
                  clock_timestamp() AS learned_at,
                  coalesce(array_agg(k.ord) FILTER (WHERE k.whole), '{{}}') AS relations_locked
           FROM (SELECT hashtext(concat_ws(chr(31), %(schema)s::text, %(dataset)s::text, %(project)s::text))
                          AS scope_key,
                        hashtext(concat_ws(chr(31), u.subject, lower(u.predicate),
                                           CASE WHEN r.whole THEN NULL ELSE lower(u.object) END))
                          & {mask} AS bucket,
                        u.ord, r.whole
                 FROM unnest({keys}, %(singles)b::boolean[]) WITH ORDINALITY AS u({key_fields}, single, ord)
                 CROSS JOIN (VALUES (false), (true)) AS r(whole)
                 WHERE NOT r.whole OR u.single
                    OR EXISTS (SELECT 1 FROM {s}.single_valued sv
                               WHERE {tenant_sv} AND sv.predicate = lower(u.predicate))
                 ORDER BY 2) k""",
        schema,
        mask=sql.Literal(LOCK_BUCKETS - 1),
        keys=sql.SQL(fact_unnest(KEY_FIELDS)),
        key_fields=sql.SQL(", ".join(KEY_FIELDS)),
    )


@dataclass(frozen=True)
class Locked:
    """The row of `lock_relations` and `lock_scope`."""

    locks: int
    learned_at: datetime
    """When memory learns what the write holds: its new facts' `created_at`, the `expired_at` of
    the facts it ends, and the start of a new value that has none of its own. Read after the
    locks (not the transaction's start), so a writer that waited for another learns later."""
    relations_locked: list[int] = field(default_factory=list)
    """The inputs (1-based) whose relation `lock_relations` locked as well as their value."""


def lock_scope(schema: str) -> sql.Composed:
    """Every lock `lock_relations` could take in the scope, in ascending order (`forget` of the
    whole scope): every writer into it has committed before, and the next ones wait. Read through
    the scope's row, so that on Citus the locks are taken on the tenant's worker, where the writers
    take theirs (a statement on no distributed table runs on the coordinator); a scope never
    written has no row, and nothing to forget."""
    return tenant_statement(
        """SELECT count(pg_advisory_xact_lock(
                      hashtext(concat_ws(chr(31), %(schema)s::text, %(dataset)s::text, %(project)s::text)),
                      k.b)::text) AS locks,
                  clock_timestamp() AS learned_at
           FROM (SELECT b FROM {s}.scopes sc CROSS JOIN generate_series(0, {mask}) AS b
                 WHERE {tenant_sc} ORDER BY b) k""",
        schema,
        mask=sql.Literal(LOCK_BUCKETS - 1),
    )


@dataclass(frozen=True)
class Met:
    """A row of `met_facts`: input fact `ord` (1-based), the groups of the batch it belongs to
    (`relation`: same subject and predicate; `value`: same object too), whether its relation holds
    one value at a time, and one stored fact it meets (none: `id` is None)."""

    ord: int
    relation: int
    value: int
    single_valued: bool
    id: int | None
    same: bool | None
    """The stored fact has the input's value."""
    valid_at: datetime | None
    """The stored fact's start; None when it has none (or there is no stored fact)."""
    invalid_at: datetime | None


def late_relations(met: Sequence[Met], relations_locked: Sequence[int]) -> list[int]:
    """The inputs `met` reads as single-valued whose relation `lock_relations` did not lock: the
    relation was declared single-valued (`set_single_valued`, which holds every lock of the scope)
    while the write waited for its locks, so the lock statement's snapshot did not see it. The
    write must lock their relations too before it reads them again."""
    locked = set(relations_locked)
    return sorted({row.ord for row in met if row.single_valued and row.ord not in locked})


def met_facts(schema: str) -> sql.Composed:
    """The `Met` rows of a batch, read under the relations' locks (which every writer that ends or
    deletes a fact holds), learned at %(learned_at)s:
    - for an input of a single-valued relation (by the input's %(singles)s flag or the scope's
      registry), the facts of the relation, ended or not, that hold at its start or after it
      (`since`): a value that ended before cannot meet it, so a write reads the history from
      there on, not all of it. An open input without a start starts when memory learns it if the
      relation has facts at all (`writing.decisions`): its `since` is %(learned_at)s, and it also
      reads the fact that ended last (whether there are any) and the last of another value (how
      far an equal live value's start may move back). An ended input without a start is placed
      first: it reads the whole history;
    - else, for an open input (no invalid_at), the live facts that hold its value, and for an
      ended input the facts of equal value and equal interval (an exported history line).
    Keys are compared in SQL alone, so the batch and the store are grouped by one definition of
    case folding."""
    return tenant_statement(
        """WITH u AS (
               SELECT * FROM unnest({met}, %(singles)b::boolean[])
                    WITH ORDINALITY AS u({met_fields}, single, ord)),
           k AS (
               SELECT u.*, lower(u.predicate) AS pkey, lower(u.object) AS okey,
                      dense_rank() OVER (ORDER BY u.subject, lower(u.predicate)) AS relation,
                      dense_rank() OVER (ORDER BY u.subject, lower(u.predicate), lower(u.object)) AS value,
                      (u.single OR EXISTS (SELECT 1 FROM {s}.single_valued r
                                           WHERE {tenant_r} AND r.predicate = lower(u.predicate)))
                        AS single_valued,
                      coalesce(u.valid_at, CASE WHEN u.invalid_at IS NULL THEN %(learned_at)s::timestamptz END,
                               {unknown}) AS since
               FROM u)
           SELECT k.ord, k.relation, k.value, k.single_valued, m.id, m.same,
                  NULLIF(m.valid_at, {unknown}) AS valid_at, m.invalid_at
           FROM k LEFT JOIN LATERAL (
               SELECT f.id, lower(f.object) = k.okey AS same, f.valid_at, f.invalid_at
               FROM {s}.facts f
               WHERE {tenant_f} AND f.subject = k.subject AND lower(f.predicate) = k.pkey AND f.invalid_at IS NULL
                 AND (k.single_valued OR (k.invalid_at IS NULL AND lower(f.object) = k.okey))
               UNION ALL
               SELECT f.id, lower(f.object) = k.okey, f.valid_at, f.invalid_at
               FROM {s}.facts f
               WHERE k.single_valued AND {tenant_f} AND f.subject = k.subject AND lower(f.predicate) = k.pkey
                 AND f.invalid_at > k.since
               UNION ALL
               ((SELECT f.id, lower(f.object) = k.okey, f.valid_at, f.invalid_at
                FROM {s}.facts f
                WHERE k.single_valued AND k.valid_at IS NULL AND k.invalid_at IS NULL
                  AND {tenant_f} AND f.subject = k.subject AND lower(f.predicate) = k.pkey AND f.invalid_at <= k.since
                ORDER BY f.invalid_at DESC LIMIT 1)
               UNION
               (SELECT f.id, false, f.valid_at, f.invalid_at
                FROM {s}.facts f
                WHERE k.single_valued AND k.valid_at IS NULL AND k.invalid_at IS NULL
                  AND {tenant_f} AND f.subject = k.subject AND lower(f.predicate) = k.pkey AND f.invalid_at <= k.since
                  AND lower(f.object) <> k.okey
                ORDER BY f.invalid_at DESC LIMIT 1))
               UNION ALL
               SELECT f.id, true, f.valid_at, f.invalid_at
               FROM {s}.facts f
               WHERE NOT k.single_valued AND k.invalid_at IS NOT NULL
                 AND {tenant_f} AND f.subject = k.subject AND lower(f.predicate) = k.pkey
                 AND f.invalid_at = k.invalid_at AND f.valid_at = coalesce(k.valid_at, {unknown})
                 AND lower(f.object) = k.okey) m ON true
           ORDER BY k.ord, m.id""",
        schema,
        unknown=sql.SQL(UNKNOWN_START),
        met=sql.SQL(fact_unnest(MET_FIELDS)),
        met_fields=sql.SQL(", ".join(MET_FIELDS)),
    )


def end_facts(schema: str) -> sql.Composed:
    """End facts %(ids)s at %(ats)s, superseded by %(bys)s (NULL: ended, not replaced), memory
    learning it at %(expireds)s (NULL: the fact keeps the time it has, none for a fact this write
    stores ended, and when memory first learned the end of a fact that had ended already)."""
    return tenant_statement(
        """UPDATE {s}.facts f SET invalid_at = u.at, superseded_by = u.by,
                                  expired_at = coalesce(u.expired, f.expired_at)
           FROM unnest(%(ids)b::bigint[], %(ats)b::timestamptz[], %(bys)b::bigint[],
                       %(expireds)b::timestamptz[]) AS u(id, at, by, expired)
           WHERE {tenant_f} AND f.id = u.id""",
        schema,
    )


def merge_facts(schema: str) -> sql.Composed:
    """Fold writes equal to stored facts %(ids)s into them: the higher confidence, the earlier start
    (none, NULL, is earliest), the stored quote (else the new one), and %(repeats)s more times
    seen; a fact stays items' own only while items alone write it (%(item_owned)s: this write is
    an item's). The start of a fact that another ended (`superseded_by` it) is the moment that one
    ended, and is kept: moved earlier, both would be live between."""
    return tenant_statement(
        """UPDATE {s}.facts f
           SET confidence = greatest(f.confidence, u.confidence),
               item_owned = f.item_owned AND %(item_owned)s,
               valid_at = CASE WHEN EXISTS (SELECT 1 FROM {s}.facts p WHERE {tenant_p} AND p.superseded_by = f.id)
                               THEN f.valid_at ELSE least(f.valid_at, coalesce(u.valid_at, {unknown})) END,
               source_quote = coalesce(f.source_quote, u.quote),
               times_seen = f.times_seen + u.repeats
           FROM unnest(%(ids)b::bigint[], %(confidences)b::real[], %(valid_ats)b::timestamptz[],
                       %(quotes)b::text[], %(repeats)b::int[]) AS u(id, confidence, valid_at, quote, repeats)
           WHERE {tenant_f} AND f.id = u.id""",
        schema,
        unknown=sql.SQL(UNKNOWN_START),
    )


@dataclass(frozen=True)
class FactState:
    """A row of `fact_state`."""

    id: int
    subject: str
    predicate: str
    object: str
    valid_at: datetime | None
    """None: no known start."""
    invalid_at: datetime | None
    superseded_by: int | None


def fact_state(schema: str, *, lock: bool = False) -> sql.Composed:
    """The `FactState` of fact %(id)s; with `lock`, locked FOR UPDATE (under its relation's lock)."""
    return tenant_statement(
        """SELECT id, subject, predicate, object, NULLIF(valid_at, {unknown}) AS valid_at, invalid_at,
                  superseded_by FROM {s}.facts
           WHERE {tenant} AND id = %(id)s{lock}""",
        schema,
        lock=sql.SQL(" FOR UPDATE" if lock else ""),
        unknown=sql.SQL(UNKNOWN_START),
    )


CHAIN_DEPTH = 10_000
"""A bound on walking a supersede chain (a chain is acyclic; the bound guards the walk anyway)."""


@dataclass(frozen=True)
class ChainEnd:
    """A row of `chain_end`: the last fact of a supersede chain."""

    id: int
    invalid_at: datetime | None


def chain_end(schema: str) -> sql.Composed:
    """The `ChainEnd` of the chain of fact %(id)s, following `superseded_by` forward."""
    return tenant_statement(
        """WITH RECURSIVE chain AS (
               SELECT f.id, f.superseded_by, f.invalid_at, 1 AS depth FROM {s}.facts f
               WHERE {tenant_f} AND f.id = %(id)s
               UNION ALL
               SELECT f.id, f.superseded_by, f.invalid_at, c.depth + 1
               FROM chain c JOIN {s}.facts f ON {tenant_f} AND f.id = c.superseded_by
               WHERE c.depth < {depth})
           SELECT id, invalid_at FROM chain ORDER BY depth DESC LIMIT 1""",
        schema,
        depth=sql.Literal(CHAIN_DEPTH),
    )


# --- single-valued predicates ----------------------------------------------------------------------


def add_single_valued(schema: str) -> sql.Composed:
    """Register %(predicates)s (case-folded here) as single-valued in the scope."""
    return tenant_statement(
        """INSERT INTO {s}.single_valued (dataset, project, predicate)
           SELECT DISTINCT %(dataset)s, %(project)s, lower(p) FROM unnest(%(predicates)b::text[]) AS p
           ON CONFLICT DO NOTHING""",
        schema,
    )


def remove_single_valued(schema: str) -> sql.Composed:
    return tenant_statement(
        """DELETE FROM {s}.single_valued
           WHERE {tenant} AND predicate IN (SELECT lower(p) FROM unnest(%(predicates)b::text[]) AS p)""",
        schema,
    )


def list_single_valued(schema: str) -> sql.Composed:
    return tenant_statement("SELECT predicate FROM {s}.single_valued WHERE {tenant} ORDER BY predicate", schema)
