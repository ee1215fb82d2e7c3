"""Every insert of the write path, each from one column list, in either form a store writes
(`layouts.write_form.WriteForm`, chosen by the store's layout): one statement of `unnest` over
binary arrays for any batch (one node), or multi-row VALUES with the tenant bound in every row,
which Citus routes to the tenant's one shard (a router plan; the `unnest` form it plans on the
coordinator and copies into the shard, bench/RESULTS.md, section 7). Both take the rows in the
order given: ids ascend in it, and upserts lock in it.

A caller builds one set of parameters, the columns as arrays (`names`, `types`, ...); `chunks`
turns it into the statements to run, in the VALUES form each row's values named `names_i`. Pure;
values are always bound."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import sql
from psycopg.adapt import PyFormat
from psycopg.types.json import Jsonb

from memsoda_core.embedders.protocol import Vector
from memsoda_core.layouts.write_form import WriteForm
from memsoda_core.store.fact_columns import UNKNOWN_START
from memsoda_core.store.lexemes import fact_lexemes
from memsoda_core.validation import ValidFact
from memsoda_core.writing.statements import bump_entities

ROWS_PER_STATEMENT = 1_000
"""Rows of one VALUES insert: at most 13 bound values a row, well under PostgreSQL's 65,535
parameters of a statement (a batch may hold `limits.MAX_BATCH` facts)."""


@dataclass(frozen=True)
class Column:
    """A column an insert writes: `value` is its SQL, in which `{}` stands for the row's element of
    array parameter `param` (of SQL type `type`); without `param`, `value` is the same in every row
    (a constant, a bound scalar)."""

    name: str
    value: str = "{}"
    param: str | None = None
    type: str = ""
    packed: Packed | None = None
    """How the ARRAYS form carries an element no SQL array can hold, else as `type`."""
    get: Callable[[Any], Any] | None = None
    """A row's value from the value the caller writes (`TableInsert.params`), where it has one."""


@dataclass(frozen=True)
class Packed:
    """An element the ARRAYS form sends packed: as SQL type `type`, `dump` of each Python value,
    and `value` (`{}` the packed element) unpacking it. A namespace is an array of labels, and
    namespaces of different lengths cannot be one text[][] parameter."""

    type: str
    value: str
    dump: Callable[[Any], Any]


def each(name: str, param: str, type_: str, value: str = "{}", *, get: Callable[[Any], Any] | None = None) -> Column:
    """A column whose row i holds element i of array parameter `param` (`get` of the row's value)."""
    return Column(name, value, param, type_, get=get)


@dataclass(frozen=True)
class NewFact:
    """A fact as `FACTS` writes it: the checked fact, the ids of its entities, how often it was
    seen, its embedding."""

    fact: ValidFact
    subject_id: int
    object_id: int | None
    anchor_id: int
    seen: int
    embedding: Vector


@dataclass(frozen=True)
class TableInsert:
    """One insert: its table (and alias), the columns after the tenant's, what follows the rows."""

    table: str
    alias: str
    columns: tuple[Column, ...]
    tail: str = ""
    """ON CONFLICT / RETURNING; `{s}` is the schema."""
    own_arrays: Callable[[str], sql.Composed] | None = None
    """The ARRAYS form's statement of its own, over the same parameters, where the generated one
    cannot serve (said on the insert)."""

    @property
    def arrays(self) -> tuple[tuple[str, str], ...]:
        """(parameter, element type in the ARRAYS form) of each array parameter, once each, in
        column order."""
        seen: dict[str, str] = {}
        for column in self.columns:
            if column.param is not None:
                seen.setdefault(column.param, column.packed.type if column.packed else column.type)
        return tuple(seen.items())

    def params(self, rows: Sequence[Any]) -> dict[str, list[Any]]:
        """The array parameters of `rows`, each column's `get` of every row."""
        return {c.param: [c.get(row) for row in rows] for c in self.columns if c.param is not None and c.get}

    def packed(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """`params` as the ARRAYS form sends them: each packed column's elements dumped."""
        packed = {c.param: c.packed for c in self.columns if c.param is not None and c.packed is not None}
        if not packed:
            return params
        return {**params, **{param: [how.dump(v) for v in params[param]] for param, how in packed.items()}}

    def statement(self, schema: str, form: WriteForm, rows: int = 0) -> sql.Composed:
        """The statement in `form`; in the ROWS form, for `rows` rows. (Table, alias, column and
        parameter names are this module's constants: SQL text, not user input.)"""
        s = sql.Identifier(schema)
        names = ", ".join(("dataset", "project", *(column.name for column in self.columns)))
        head = sql.SQL("INSERT INTO {s}.{table} AS {alias} ({names})").format(
            s=s, table=sql.SQL(self.table), alias=sql.SQL(self.alias), names=sql.SQL(names)
        )
        tail = sql.SQL(self.tail).format(s=s)
        if form is WriteForm.ARRAYS and self.own_arrays is not None:
            return self.own_arrays(schema)
        tenant = [sql.Placeholder("dataset"), sql.Placeholder("project")]
        if form is WriteForm.ROWS:
            values = sql.SQL(", ").join(
                [
                    sql.SQL("({})").format(sql.SQL(", ").join(tenant + [_value(column, i) for column in self.columns]))
                    for i in range(rows)
                ]
            )
            return sql.SQL("{head} VALUES {values}{tail}").format(head=head, values=values, tail=tail)
        arrays = sql.SQL(", ").join(
            [
                sql.SQL("{}::{}[]").format(sql.Placeholder(param, PyFormat.BINARY), sql.SQL(type_))
                for param, type_ in self.arrays
            ]
        )
        return sql.SQL(
            "{head}\nSELECT {selected}\nFROM unnest({arrays}) WITH ORDINALITY AS u({aliases}, ord)"
            "\nORDER BY u.ord{tail}"
        ).format(
            head=head,
            selected=sql.SQL(", ").join(tenant + [_value(column, None) for column in self.columns]),
            arrays=arrays,
            aliases=sql.SQL(", ".join(param for param, _ in self.arrays)),
            tail=tail,
        )


def _value(column: Column, row: int | None) -> sql.Composable:
    """`column`'s SQL for row `row` of the ROWS form (its element bound as `param_row`, cast), or
    (None) of the ARRAYS form (the unnest column named like its parameter)."""
    if column.param is None:
        return sql.SQL(column.value)
    element: sql.Composable
    if row is None:
        element = sql.SQL("u." + column.param)
        if column.packed is not None:
            return sql.SQL(column.packed.value).format(element)
    else:
        element = sql.SQL("{}::" + column.type).format(sql.Placeholder(f"{column.param}_{row}"))
    return sql.SQL(column.value).format(element)


def chunks(
    insert: TableInsert, schema: str, form: WriteForm, params: Mapping[str, Any]
) -> list[tuple[sql.Composed, Mapping[str, Any]]]:
    """The statements that write `params`' rows in `form`, each with its parameters: one in the
    ARRAYS form; in the ROWS form one per `ROWS_PER_STATEMENT` rows."""
    if form is WriteForm.ARRAYS:
        return [(insert.statement(schema, form), insert.packed(params))]
    arrays = [param for param, _ in insert.arrays]
    count = len(params[arrays[0]])
    return [
        (insert.statement(schema, form, min(count, start + ROWS_PER_STATEMENT) - start), chunk)
        for start in range(0, count, ROWS_PER_STATEMENT)
        for chunk in [row_params(params, arrays, start, min(count, start + ROWS_PER_STATEMENT))]
    ]


def row_params(params: Mapping[str, Any], arrays: Sequence[str], start: int, stop: int) -> dict[str, Any]:
    """The parameters of rows `start`..`stop` of a VALUES statement, from the array form's: each
    array of `arrays` as its elements (`name_i`, i from 0), every other parameter as it is."""
    rows = {f"{name}_{i}": params[name][start + i] for name in arrays for i in range(stop - start)}
    return {**{k: v for k, v in params.items() if k not in arrays}, **rows}


ENTITIES = TableInsert(
    "entities",
    "e",
    (
        each("name", "names", "text"),
        each("type", "types", "text"),
        each("embedding", "embeddings", "vector"),
        Column("fact_count", "0"),
    ),
    " ON CONFLICT (dataset, project, name) DO NOTHING RETURNING e.name, e.id",
)
"""Create the entities %(names)s the scope does not have, with no facts counted yet (the counts are
added at the write's end, `BUMP_ENTITIES`, so writers into one scope do not wait for each other
through the rest of the write); returns (name, id) of those created. Those another writer created
meanwhile are read and locked by the caller (`statements.known_entities`)."""

BUMP_ENTITIES = TableInsert(
    "entities",
    "e",
    (
        each("name", "names", "text"),
        each("type", "types", "text"),
        Column("embedding", "%(filler)s::vector"),
        each("fact_count", "touches", "int"),
    ),
    """ ON CONFLICT (dataset, project, name) DO UPDATE
       SET type = CASE WHEN e.type = 'OTHER' THEN EXCLUDED.type ELSE e.type END,
           fact_count = e.fact_count + EXCLUDED.fact_count
       RETURNING e.xmax = 0 AS created""",
    own_arrays=bump_entities,
)
"""Add %(touches)s facts to the counts of the scope's entities %(names)s (sorted) and keep a
specific type of %(types)s over OTHER (`counts.keep_specific_type`'s rule). Every one exists
(created at the start of the write, or locked FOR KEY SHARE since, so no `forget` removed it).
An upsert that always conflicts rather than an UPDATE, as it takes the rows in the order given,
so two writers wait for each other instead of deadlocking. NOT NULL is checked before ON CONFLICT
resolves: in the ROWS form the proposed row carries %(filler)s (any vector of the store's
dimensions), never stored (Citus takes no subquery in a VALUES insert), and each row says whether
it was created (a new row has no xmax), which would break that every one exists, and the caller
raises then. The ARRAYS form is `statements.bump_entities`: a partitioned table returns no system
column, so its proposed row copies the stored embedding instead (NULL, and an error, for an entity
that is gone)."""

_KNOWN_OR_UNKNOWN_START = "coalesce({}, " + UNKNOWN_START + ")"

FACTS = TableInsert(
    "facts",
    "f",
    (
        each("subject", "subjects", "text", get=lambda r: r.fact.subject),
        each("predicate", "predicates", "text", get=lambda r: r.fact.predicate),
        each("object", "objects", "text", get=lambda r: r.fact.object),
        each("object_type", "object_types", "text", get=lambda r: r.fact.object_type),
        each("subject_id", "subject_ids", "bigint", get=lambda r: r.subject_id),
        each("object_id", "object_ids", "bigint", get=lambda r: r.object_id),
        each("anchor_id", "anchor_ids", "bigint", get=lambda r: r.anchor_id),
        each(
            "valid_at", "valid_ats", "timestamptz", "coalesce({}, " + UNKNOWN_START + ")", get=lambda r: r.fact.valid_at
        ),
        each("invalid_at", "invalid_ats", "timestamptz", get=lambda r: r.fact.invalid_at),
        each("confidence", "confidences", "real", get=lambda r: r.fact.confidence),
        each("source_quote", "quotes", "text", get=lambda r: r.fact.source_quote),
        each("times_seen", "seen", "int", get=lambda r: r.seen),
        each("embedding", "embeddings", "vector", get=lambda r: r.embedding),
        Column("created_at", "%(learned_at)s"),
        Column("item_owned", "%(item_owned)s"),
    ),
    " RETURNING id, " + fact_lexemes().as_string(None) + " AS lexemes",
)
"""Insert a batch of `NewFact`s (`FACTS.params`; a column is one line here) in the given order (so
their ids ascend in it), learned at
%(learned_at)s (`created_at`; a NULL start is stored as `UNKNOWN_START`), written for items or not
(%(item_owned)s); each row returned as a `statements.InsertedFact`."""


def fact_arrays(facts: Sequence[ValidFact], fields: Sequence[str]) -> dict[str, list[Any]]:
    """The array parameters `FACTS` binds for the `fields` of `facts` (`subjects` for "subject",
    ...), for a statement that reads those fields of a batch as `FACTS` writes them."""
    columns = {column.name: column for column in FACTS.columns}
    return {str(columns[name].param): [getattr(fact, name) for fact in facts] for name in fields}


def fact_unnest(fields: Sequence[str]) -> str:
    """SQL: `FACTS`' array parameters of `fields`, typed, as `unnest` takes them."""
    columns = {column.name: column for column in FACTS.columns}
    return ", ".join(f"%({columns[name].param})b::{columns[name].type}[]" for name in fields)


FACT_ENTITIES = TableInsert(
    "fact_entities",
    "fe",
    (
        each("fact_id", "fact_ids", "bigint"),
        each("entity_id", "entity_ids", "bigint"),
        each("roles", "roles", "smallint"),
    ),
)

LEXEMES = TableInsert(
    "lexemes",
    "l",
    (each("lexeme", "lexemes", "text"), each("facts", "counts", "int")),
    " ON CONFLICT (dataset, project, lexeme) DO UPDATE SET facts = l.facts + EXCLUDED.facts",
)
"""Add %(counts)s facts to the scope's count of each of %(lexemes)s (`store.lexemes`), given sorted:
upserted in that order, so two writers into one scope wait for each other instead of deadlocking."""

SOURCES = TableInsert(
    "fact_sources",
    "fs",
    (
        each("fact_id", "fact_ids", "bigint"),
        Column("thread_id", "%(thread_id)s::text"),
        each("message_id", "message_ids", "text"),
    ),
)
"""Record that facts %(fact_ids)s came from messages %(message_ids)s of thread %(thread_id)s."""

UPSERT_SET = """ ON CONFLICT (dataset, project, namespace, key) DO UPDATE
           SET value = EXCLUDED.value, fact_id = EXCLUDED.fact_id, updated_at = EXCLUDED.updated_at,
               ttl_minutes = EXCLUDED.ttl_minutes, expires_at = EXCLUDED.expires_at"""
"""What a put of a stored item replaces: a put without a TTL leaves it without one (LangGraph's)."""

_NAMESPACE_AS_JSONB = Packed(
    "jsonb",
    "ARRAY(SELECT n.label FROM jsonb_array_elements_text({}) WITH ORDINALITY AS n(label, ord) ORDER BY n.ord)",
    lambda labels: Jsonb(list(labels)),
)

ITEMS = TableInsert(
    "items",
    "i",
    (
        Column("namespace", "{}", "namespaces", "text[]", _NAMESPACE_AS_JSONB),
        each("key", "keys", "text"),
        each("value", "values", "jsonb"),
        each("fact_id", "fact_ids", "bigint"),
        Column("created_at", "%(now)s"),
        Column("updated_at", "%(now)s"),
        each("ttl_minutes", "ttl_minutes", "float8"),
        each("expires_at", "ttl_minutes", "float8", "%(now)s + {} * interval '1 minute'"),
    ),
    UPSERT_SET,
)
"""Store items (value, fact_id, ttl_minutes) at %(now)s: new ones created, existing ones replaced;
an item with a TTL expires that many minutes after %(now)s."""
