"""SQL of items (`items.operations`): per-item locks, reads, upserts and deletes, the facts items leave
behind, searches and namespace listings, with the rows they return. Pure: each builder returns a
`sql.Composed`; values are always bound.

A batch of items is bound as one jsonb array of {"namespace": [...], "key": ..., ...} (namespaces
have different lengths, so they cannot be one text[][] parameter). A statement on one scope carries
the bound tenant predicate; the cross-scope ones (a namespace prefix or listing that no scope
holds alone) say so in their names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import sql

from memsoda_core.items.values import IS_OBJECT, Condition, Namespace, StoredItem
from memsoda_core.store.statements import tenant_statement
from memsoda_core.store.tenant_index import tenant_predicate
from memsoda_core.writing.reconcile_statements import LOCK_BUCKETS

_BATCH = """batch AS (
               SELECT ARRAY(SELECT n.label FROM jsonb_array_elements_text(e.item -> 'namespace')
                                                WITH ORDINALITY AS n(label, ord) ORDER BY n.ord)::text[] AS namespace,
                      e.item ->> 'key' AS key, e.item -> 'value' AS value, (e.item ->> 'fact_id')::bigint AS fact_id,
                      (e.item ->> 'ttl_minutes')::float8 AS ttl_minutes
               FROM jsonb_array_elements(%(items)s::jsonb) AS e(item))"""

_ITEM_COLUMNS = "i.dataset, i.project, i.namespace, i.key, i.value, i.created_at, i.updated_at, i.fact_id, i.expires_at"

_UNDER_PREFIX = "i.namespace[1:%(prefix_labels)s] = %(prefix)s::text[]"

_PARTS = {"batch": sql.SQL(_BATCH), "columns": sql.SQL(_ITEM_COLUMNS), "under": sql.SQL(_UNDER_PREFIX)}


def _scope(scoped: bool) -> sql.Composable:
    """The bound tenant predicate, or for a statement across the datasets of project %(project)s
    that project's, and AND."""
    return sql.SQL("{} AND ").format(tenant_predicate("i") if scoped else sql.SQL("i.project = %(project)s"))


@dataclass(frozen=True)
class ItemRow:
    """An item as statements return it (`_ITEM_COLUMNS`, plus a score where there is one)."""

    dataset: str
    project: str
    namespace: list[str]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    fact_id: int | None
    expires_at: datetime | None

    def stored(self, score: float | None = None) -> StoredItem:
        return StoredItem(
            dataset=self.dataset,
            project=self.project,
            namespace=tuple(self.namespace),
            key=self.key,
            value=self.value,
            created_at=self.created_at,
            updated_at=self.updated_at,
            fact_id=self.fact_id,
            score=score,
            expires_at=self.expires_at,
        )


@dataclass(frozen=True)
class ItemFact:
    """A row of `item_facts`: an item of the batch and the fact it refers to now (if any)."""

    namespace: list[str]
    key: str
    fact_id: int | None
    subject: str | None
    predicate: str | None
    object: str | None


def lock_items(schema: str) -> sql.Composed:
    """Take, until the transaction ends, the advisory lock of each item of %(items)s, in ascending
    order: two writers of one item take turns from before either reads the fact it refers to. An
    item's key is hashed into one of `LOCK_BUCKETS` locks of its scope, so a write of many items
    (an import, a sweep) holds a bounded number (PostgreSQL's lock table is shared and bounded);
    two items in one bucket only make their writers take turns. The one-bigint form keeps these
    apart from the facts' two-int locks (`reconcile.lock_relations`)."""
    return tenant_statement(
        """WITH {batch}
           SELECT count(pg_advisory_xact_lock(k.key)::text) AS locks
           FROM (SELECT DISTINCT hashtextextended(concat_ws(
                         chr(31), %(schema)s::text, %(dataset)s::text, %(project)s::text,
                         (hashtextextended(concat_ws(chr(31), b.key, array_to_string(b.namespace, chr(31))), 0)
                          & {mask})::text), 0) AS key
                 FROM batch b ORDER BY 1) k""",
        schema,
        mask=sql.Literal(LOCK_BUCKETS - 1),
        **_PARTS,
    )


def item_facts(schema: str) -> sql.Composed:
    """`ItemFact` of each stored item of %(items)s."""
    return tenant_statement(
        """WITH {batch}
           SELECT i.namespace, i.key, i.fact_id, f.subject, f.predicate, f.object
           FROM batch b
           JOIN {s}.items i ON {tenant_i} AND i.namespace = b.namespace AND i.key = b.key
           LEFT JOIN {s}.facts f ON {tenant_f} AND f.id = i.fact_id""",
        schema,
        **_PARTS,
    )


def delete_items(schema: str) -> sql.Composed:
    return tenant_statement(
        """WITH {batch}
           DELETE FROM {s}.items i USING batch b
           WHERE {tenant_i} AND i.namespace = b.namespace AND i.key = b.key""",
        schema,
        **_PARTS,
    )


def orphaned_facts(schema: str) -> sql.Composed:
    """Which of facts %(ids)s are items' own, live, began before %(now)s and no item of the scope
    refers to any more (their relations' locks are held), locked FOR UPDATE."""
    return tenant_statement(
        """SELECT f.id FROM {s}.facts f
           WHERE {tenant_f} AND f.id = ANY(%(ids)s::bigint[]) AND f.item_owned
             AND f.invalid_at IS NULL AND f.superseded_by IS NULL AND f.valid_at < %(now)s
             AND NOT EXISTS (SELECT 1 FROM {s}.items i WHERE {tenant_i} AND i.fact_id = f.id)
           ORDER BY f.id
           FOR UPDATE OF f""",
        schema,
        **_PARTS,
    )


def disown_unreferenced_facts(schema: str) -> sql.Composed:
    """Facts %(ids)s that are items' own and live but no item of the scope refers to are the
    application's from now on (an import's line marked item_owned whose item line it did not write;
    their relations' locks are held)."""
    return tenant_statement(
        """UPDATE {s}.facts f SET item_owned = false
           WHERE {tenant_f} AND f.id = ANY(%(ids)s::bigint[]) AND f.item_owned
             AND f.invalid_at IS NULL AND f.superseded_by IS NULL
             AND NOT EXISTS (SELECT 1 FROM {s}.items i WHERE {tenant_i} AND i.fact_id = f.id)""",
        schema,
    )


def get_item(schema: str) -> sql.Composed:
    return tenant_statement(
        """SELECT {columns} FROM {s}.items i
           WHERE {tenant_i} AND i.namespace = %(namespace)s::text[] AND i.key = %(key)s""",
        schema,
        **_PARTS,
    )


def filter_sql(conditions: list[Condition]) -> tuple[sql.Composable, dict[str, Any]]:
    """` AND ...` over `i.value` for the filter's conditions, and their bound values."""
    parts: list[sql.Composable] = []
    params: dict[str, Any] = {}
    for n, condition in enumerate(conditions):
        path, value = sql.Placeholder(f"filter_path_{n}"), sql.Placeholder(f"filter_value_{n}")
        params[f"filter_path_{n}"] = list(condition.path)
        found = sql.SQL("(i.value #> {p}::text[])").format(p=path)
        if condition.op == IS_OBJECT:
            parts.append(sql.SQL("jsonb_typeof({f}) = 'object'").format(f=found))
            continue
        params[f"filter_value_{n}"] = condition.value_json
        if condition.op in ("$eq", "$ne"):
            compare = sql.SQL("=" if condition.op == "$eq" else "<>")
            parts.append(sql.SQL("coalesce({f}, 'null'::jsonb) {c} {v}::jsonb").format(f=found, c=compare, v=value))
        else:
            compare = sql.SQL({"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}[condition.op])
            number = numeric_operand(condition.value_json)
            if number is None:
                template = "(jsonb_typeof({f}) = 'string' AND {f} {c} {v}::jsonb)"
            else:
                params[f"filter_value_{n}"], params["filter_number_text"] = number, NUMBER_TEXT
                template = _AS_NUMBER + " {c} {v}::numeric"
            pattern = sql.Placeholder("filter_number_text")
            parts.append(sql.SQL(template).format(f=found, c=compare, v=value, pattern=pattern))
    return sql.SQL("").join(sql.SQL(" AND ") + part for part in parts), params


NUMBER_TEXT = r"^[ \t\n\r]*[+-]?([0-9]{1,100}(\.[0-9]{0,100})?|\.[0-9]{1,100})([eE][+-]?[0-9]{1,3})?[ \t\n\r]*$"
"""A decimal number as text (" 5", "-1.5e3"; bounded, so `numeric` takes any), the same regular
expression in Python and PostgreSQL: an order comparison reads it as that number, as LangGraph's
`InMemoryStore` does (`float(value)`)."""

_AS_NUMBER = """(CASE jsonb_typeof({f}) WHEN 'number' THEN ({f})::numeric
                 WHEN 'string' THEN CASE WHEN ({f} #>> '{{}}') ~ {pattern} THEN ({f} #>> '{{}}')::numeric END
            END)"""
"""The number a field holds, or the number a string there reads as (`NUMBER_TEXT`); NULL otherwise."""


def numeric_operand(value_json: str) -> str | None:
    """An order comparison's operand (JSON) as the number it compares with, when it is a number or
    a string that reads as one (`NUMBER_TEXT`): then numbers and such strings compare as numbers on
    either side. None: another string, compared with strings only."""
    value = json.loads(value_json)
    if isinstance(value, str):
        return value.strip(" \t\n\r") if re.fullmatch(NUMBER_TEXT, value) else None
    return repr(value) if isinstance(value, float) else str(value)  # `_operand` allows no bool here


def prefix_params(prefix: Namespace) -> dict[str, Any]:
    return {"prefix": list(prefix), "prefix_labels": len(prefix)}


def recent_items(schema: str, filters: sql.Composable, *, scoped: bool) -> sql.Composed:
    """Items under %(prefix)s matching `filters`, most recently updated first, a page of
    %(limit)s after %(offset)s; in one scope, or (`scoped` False) in every dataset of the project."""
    return tenant_statement(
        """SELECT {columns} FROM {s}.items i WHERE {scope}{under}{filters}
           ORDER BY i.updated_at DESC, i.namespace, i.key
           LIMIT %(limit)s OFFSET %(offset)s""",
        schema,
        filters=filters,
        scope=_scope(scoped),
        **_PARTS,
    )


def items_of_facts(schema: str, filters: sql.Composable) -> sql.Composed:
    """The scope's items under %(prefix)s, matching `filters`, that refer to facts %(fact_ids)s."""
    return tenant_statement(
        """SELECT {columns} FROM {s}.items i
           WHERE {tenant_i} AND {under} AND i.fact_id = ANY(%(fact_ids)s::bigint[]){filters}
           ORDER BY i.namespace, i.key""",
        schema,
        filters=filters,
        **_PARTS,
    )


def filtered_facts(schema: str, filters: sql.Composable, *, scoped: bool) -> sql.Composed:
    """(dataset, fact_id) of the items under %(prefix)s matching `filters` that have a fact, at most
    %(limit)s rows, in no order; in one scope, or (`scoped` False) in every dataset of the project."""
    return tenant_statement(
        """SELECT i.dataset, i.fact_id FROM {s}.items i
           WHERE {scope}{under}{filters} AND i.fact_id IS NOT NULL
           LIMIT %(limit)s""",
        schema,
        filters=filters,
        scope=_scope(scoped),
        **_PARTS,
    )


def unkept_items(schema: str, filters: sql.Composable, *, scoped: bool, by_vector: bool) -> sql.Composed:
    """A search by query's items after those recall kept: items under %(prefix)s matching `filters`
    whose fact is not one of recall's kept facts (%(kept_datasets)s, %(kept_ids)s: pairs), those
    with a fact first, nearest the query embedding %(qvec)s first (`by_vector`; else, as those
    without one, most recently updated first), a page of %(limit)s after %(offset)s; in one
    scope, or (`scoped` False) in every dataset of the project. Every such item's distance is
    computed (no index serves a filtered set); it runs only for a page reaching past the kept ones."""
    nearest = sql.SQL("f.embedding <=> %(qvec)s, " if by_vector else "")
    return tenant_statement(
        """SELECT {columns} FROM {s}.items i
           LEFT JOIN {s}.facts f ON f.dataset = i.dataset AND f.project = i.project AND f.id = i.fact_id
           WHERE {scope}{under}{filters}
             AND NOT EXISTS (SELECT 1 FROM unnest(%(kept_datasets)s::text[], %(kept_ids)s::bigint[]) AS k(dataset, id)
                             WHERE k.dataset = i.dataset AND k.id = i.fact_id)
           ORDER BY i.fact_id IS NULL, {nearest}i.updated_at DESC, i.namespace, i.key
           LIMIT %(limit)s OFFSET %(offset)s""",
        schema,
        filters=filters,
        scope=_scope(scoped),
        nearest=nearest,
        **_PARTS,
    )


def item_scopes(schema: str) -> sql.Composed:
    """The datasets of project %(project)s holding items under %(prefix)s, at most %(limit)s."""
    return tenant_statement(
        """SELECT DISTINCT i.dataset FROM {s}.items i WHERE i.project = %(project)s AND {under}
           ORDER BY 1 LIMIT %(limit)s""",
        schema,
        **_PARTS,
    )


def list_namespaces(schema: str, *, scoped: bool) -> sql.Composed:
    """The distinct namespaces (cut to %(max_depth)s labels unless NULL) with at least
    %(min_labels)s labels whose label at each of %(positions)s (1-based; negative: from the end)
    is the matching one of %(labels)s, in LangGraph's order (label by label, bytewise), a page of
    %(limit)s after %(offset)s; in one scope, or (`scoped` False) in every dataset of the project."""
    return tenant_statement(
        """SELECT n.namespace FROM (
               SELECT DISTINCT coalesce(i.namespace[1:%(max_depth)s::int], i.namespace) AS namespace
               FROM {s}.items i
               WHERE {scope}cardinality(i.namespace) >= %(min_labels)s
                 AND NOT EXISTS (
                     SELECT 1 FROM unnest(%(positions)s::int[], %(labels)s::text[]) AS c(at, label)
                     WHERE i.namespace[CASE WHEN c.at > 0 THEN c.at ELSE cardinality(i.namespace) + 1 + c.at END]
                           IS DISTINCT FROM c.label)) n
           ORDER BY n.namespace COLLATE "C"
           LIMIT %(limit)s OFFSET %(offset)s""",
        schema,
        scope=_scope(scoped),
        **_PARTS,
    )


# --- TTL (LangGraph's): refresh on read, and the sweep of expired items -----------------------------


def refresh_items(schema: str) -> sql.Composed:
    """Move the expiry of the scope's items %(items)s that have a TTL to %(now)s + their TTL (a read
    that refreshes them); returns their `ItemRow`s as they are now."""
    return tenant_statement(
        """WITH {batch}
           UPDATE {s}.items i SET expires_at = %(now)s + i.ttl_minutes * interval '1 minute'
           FROM batch b
           WHERE {tenant_i} AND i.namespace = b.namespace AND i.key = b.key AND i.ttl_minutes IS NOT NULL
           RETURNING {columns}""",
        schema,
        **_PARTS,
    )


def expired_scopes(schema: str) -> sql.Composed:
    """(dataset, project) of the scopes holding items expired at %(at)s, of project %(project)s
    unless it is NULL (the sweep's index first)."""
    return sql.SQL(
        """SELECT DISTINCT i.dataset, i.project FROM {s}.items i
           WHERE i.expires_at IS NOT NULL AND i.expires_at <= %(at)s
             AND (%(project)s::text IS NULL OR i.project = %(project)s)
           ORDER BY 1, 2"""
    ).format(s=sql.Identifier(schema))


@dataclass(frozen=True)
class ExpiredItem:
    """A row of `expired_items`: an item expired at the sweep's time, and its fact's value key (for
    the relation locks; NULL without a fact)."""

    namespace: list[str]
    key: str
    subject: str | None
    predicate: str | None
    object: str | None


def expired_items(schema: str) -> sql.Composed:
    """The scope's `ExpiredItem`s at %(at)s."""
    return tenant_statement(
        """SELECT i.namespace, i.key, f.subject, f.predicate, f.object FROM {s}.items i
           LEFT JOIN {s}.facts f ON {tenant_f} AND f.id = i.fact_id
           WHERE {tenant_i} AND i.expires_at <= %(at)s
           ORDER BY i.namespace, i.key""",
        schema,
    )


def delete_expired_items(schema: str) -> sql.Composed:
    """Delete those of the scope's items %(items)s still expired at %(at)s (a read since may have
    refreshed one); returns the fact id of each deleted item (NULL without one)."""
    return tenant_statement(
        """WITH {batch}
           DELETE FROM {s}.items i USING batch b
           WHERE {tenant_i} AND i.namespace = b.namespace AND i.key = b.key AND i.expires_at <= %(at)s
           RETURNING i.fact_id""",
        schema,
        **_PARTS,
    )


def expired_item_facts(schema: str, depth: int) -> sql.Composed:
    """`deleting.delete_facts`' selection of the facts of expired items: those of facts %(ids)s that
    no item refers to any more and are items' own, with the item's past texts (items' own facts
    superseded by one of those facts, back along `superseded_by`, at most `depth` steps). A fact
    the application wrote stays, and so does its history; an item's past text it superseded goes."""
    return tenant_statement(
        """WITH RECURSIVE chain AS (
               SELECT f.id, f.item_owned, 1 AS depth FROM {s}.facts f
               WHERE {tenant_f} AND f.id = ANY(%(ids)b::bigint[])
                 AND NOT EXISTS (SELECT 1 FROM {s}.items i WHERE {tenant_i} AND i.fact_id = f.id)
               UNION ALL
               SELECT f.id, f.item_owned, c.depth + 1 FROM chain c
               JOIN {s}.facts f ON {tenant_f} AND f.superseded_by = c.id
               WHERE c.depth < {depth} AND f.item_owned)
           SELECT DISTINCT id AS fact_id FROM chain WHERE item_owned""",
        schema,
        depth=sql.Literal(depth),
    )


# --- export (`items.transfer`) ------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportedItem:
    """A row of `export_items`: an item whole, its fact by id."""

    namespace: list[str]
    key: str
    value: dict[str, Any]
    fact_id: int | None
    ttl_minutes: float | None
    expires_at: datetime | None
    created_at: datetime
    updated_at: datetime


def export_items(schema: str) -> sql.Composed:
    """The scope's items as `ExportedItem`s in (namespace, key) order, a keyset page of %(limit)s
    after (%(after_namespace)s, %(after_key)s) (NULL: from the first)."""
    return tenant_statement(
        """SELECT i.namespace, i.key, i.value, i.fact_id, i.ttl_minutes, i.expires_at, i.created_at, i.updated_at
           FROM {s}.items i
           WHERE {tenant_i}
             AND (%(after_namespace)s::text[] IS NULL
                  OR (i.namespace, i.key) > (%(after_namespace)s::text[] COLLATE "C", %(after_key)s::text COLLATE "C"))
           ORDER BY i.namespace, i.key
           LIMIT %(limit)s""",
        schema,
    )
