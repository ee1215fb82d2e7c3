"""The write statements' forms for a distributed store (`StoreInfo.distributed`): each a multi-row
VALUES insert with the tenant as a bound constant in every row, which Citus routes to the tenant's
one shard (a router plan). The one-node forms insert `SELECT ... FROM unnest(arrays)`, one
statement text for any batch, which Citus does not route: it runs the SELECT on the coordinator
and then copies the rows into the shard (bench/RESULTS.md, section 7).

Each builder takes the number of rows; `row_params` turns the one-node form's array parameters
into the rows' own (array `names`' element i becomes `names_i`), so a caller builds one set of
parameters for either form (`writing.insert_rows`). Pure; values are always bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from memsoda_core.items.statements import UPSERT_SET
from memsoda_core.store.fact_columns import UNKNOWN_START
from memsoda_core.store.lexemes import fact_lexemes

ROWS_PER_STATEMENT = 1_000
"""Rows of one VALUES insert: at most 13 bound values a row, well under PostgreSQL's 65,535
parameters of a statement (a batch may hold `limits.MAX_BATCH` facts)."""


@dataclass(frozen=True)
class Cell:
    """A column of the rows: row i's element of array parameter `param`, in `expression` (`{}`
    stands for the bound value)."""

    param: str
    expression: str


def cast(param: str, type_: str) -> Cell:
    return Cell(param, "{}::" + type_)


Value = Cell | str
"""A `Cell`, or SQL that is the same in every row (the tenant, a constant)."""

TENANT: tuple[Value, ...] = ("%(dataset)s", "%(project)s")


@dataclass(frozen=True)
class ValuesInsert:
    """One write statement as VALUES: its head (up to VALUES), the cells of a row, its tail."""

    head: str
    cells: tuple[Value, ...]
    tail: str = ""

    @property
    def arrays(self) -> tuple[str, ...]:
        """The one-node form's array parameters this statement takes row by row."""
        return tuple(value.param for value in self.cells if isinstance(value, Cell))

    def statement(self, schema: str, count: int) -> sql.Composed:
        """The statement for `count` rows, {s} in head and tail the schema."""

        def cell(value: Value, i: int) -> sql.Composable:
            if isinstance(value, Cell):
                return sql.SQL(value.expression).format(sql.Placeholder(f"{value.param}_{i}"))
            return sql.SQL(value)

        rows = sql.SQL(", ").join(
            sql.SQL("({})").format(sql.SQL(", ").join(cell(value, i) for value in self.cells)) for i in range(count)
        )
        s = sql.Identifier(schema)
        return sql.SQL("{head} VALUES {rows}{tail}").format(
            head=sql.SQL(self.head).format(s=s), rows=rows, tail=sql.SQL(self.tail).format(s=s)
        )


def row_params(params: Mapping[str, Any], arrays: Sequence[str], start: int, stop: int) -> dict[str, Any]:
    """The parameters of rows `start`..`stop` of a VALUES statement, from the one-node form's: each
    array of `arrays` as its elements (`name_i`, i from 0), every other parameter as it is."""
    rows = {f"{name}_{i}": params[name][start + i] for name in arrays for i in range(stop - start)}
    return {**{k: v for k, v in params.items() if k not in arrays}, **rows}


ENTITIES = ValuesInsert(
    "INSERT INTO {s}.entities AS e (dataset, project, name, type, embedding, fact_count)",
    (*TENANT, cast("names", "text"), cast("types", "text"), cast("embeddings", "vector"), "0"),
    " ON CONFLICT (dataset, project, name) DO NOTHING RETURNING e.name, e.id",
)
"""`statements.insert_entities` without its second part: (name, id) of the entities created only;
those another writer created meanwhile are read and locked by the caller
(`statements.known_entities`), since Citus plans that CTE in two steps."""

BUMP_ENTITIES = ValuesInsert(
    "INSERT INTO {s}.entities AS e (dataset, project, name, type, embedding, fact_count)",
    (*TENANT, cast("names", "text"), cast("types", "text"), "%(filler)s::vector", cast("touches", "int")),
    """ ON CONFLICT (dataset, project, name) DO UPDATE
       SET type = CASE WHEN e.type = 'OTHER' THEN EXCLUDED.type ELSE e.type END,
           fact_count = e.fact_count + EXCLUDED.fact_count
       RETURNING e.xmax = 0 AS created""",
)
"""`statements.bump_entities`: the same upsert that always conflicts, rows in the order given.
Citus takes no subquery in a VALUES insert, so the proposed row's embedding is %(filler)s (any
vector of the store's dimensions), never stored; each row says whether it was created (a new row
has no xmax), which would break that every one exists, and the caller raises then."""

FACTS = ValuesInsert(
    """INSERT INTO {s}.facts (dataset, project, subject, predicate, object, object_type,
                              subject_id, object_id, anchor_id, valid_at, invalid_at,
                              confidence, source_quote, times_seen, embedding, created_at)""",
    (
        *TENANT,
        cast("subjects", "text"),
        cast("predicates", "text"),
        cast("objects", "text"),
        cast("object_types", "text"),
        cast("subject_ids", "bigint"),
        cast("object_ids", "bigint"),
        cast("anchor_ids", "bigint"),
        Cell("valid_ats", "coalesce({}::timestamptz, " + UNKNOWN_START + ")"),
        cast("invalid_ats", "timestamptz"),
        cast("confidences", "real"),
        cast("quotes", "text"),
        cast("seen", "int"),
        cast("embeddings", "vector"),
        "%(learned_at)s",
    ),
    " RETURNING id, " + fact_lexemes().as_string(None) + " AS lexemes",
)
"""`statements.insert_facts`: rows inserted in the order given (so ids ascend), each returned as
an `InsertedFact`."""

FACT_ENTITIES = ValuesInsert(
    "INSERT INTO {s}.fact_entities AS fe (dataset, project, fact_id, entity_id, roles)",
    (*TENANT, cast("fact_ids", "bigint"), cast("entity_ids", "bigint"), cast("roles", "smallint")),
)

LEXEMES = ValuesInsert(
    "INSERT INTO {s}.lexemes AS l (dataset, project, lexeme, facts)",
    (*TENANT, cast("lexemes", "text"), cast("counts", "int")),
    " ON CONFLICT (dataset, project, lexeme) DO UPDATE SET facts = l.facts + EXCLUDED.facts",
)
"""`lexemes.count_lexemes`; the caller gives the lexemes sorted (the upsert's lock order)."""

SOURCES = ValuesInsert(
    "INSERT INTO {s}.fact_sources AS fs (dataset, project, fact_id, thread_id, message_id)",
    (*TENANT, cast("fact_ids", "bigint"), "%(thread_id)s::text", cast("message_ids", "text")),
)
"""`sources.insert_sources`."""

ITEMS = ValuesInsert(
    """INSERT INTO {s}.items AS i (dataset, project, namespace, key, value, fact_id, created_at, updated_at,
                                  ttl_minutes, expires_at)""",
    (
        *TENANT,
        cast("namespaces", "text[]"),
        cast("keys", "text"),
        cast("values", "jsonb"),
        cast("fact_ids", "bigint"),
        "%(now)s",
        "%(now)s",
        cast("ttl_minutes", "float8"),
        Cell("ttl_minutes", "%(now)s + {}::float8 * interval '1 minute'"),
    ),
    UPSERT_SET,
)
"""`items.upsert_items`, with the batch's columns as arrays instead of one jsonb array."""
