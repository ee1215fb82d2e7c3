"""The columns of a stored fact: one list that the SQL select list and the decoder both derive from,
so adding a `models.Fact` field is one `FactColumn` here (plus its migration)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from memsoda_core.models import Fact
from memsoda_core.store.layout import table_refs
from memsoda_core.store.tenant_index import scope_predicate, tenant_predicate
from memsoda_core.validation import Scope

UNKNOWN_START = "'-infinity'::timestamptz"
"""How a fact with no known start is stored: every liveness test (`valid_at <= at`) and index
works unchanged, and every read maps it back to None (`NULLIF`; psycopg cannot load an infinity)."""


def _as_is(value: Any) -> Any:
    return value


def _names(value: Any) -> tuple[str, ...]:
    return tuple(value or ())


def _confidence(value: Any) -> float:
    return round(float(value), 6)  # a real: drop the float4 -> float8 noise


@dataclass(frozen=True)
class FactColumn:
    name: str
    """The `Fact` field it fills, and its column's name in SQL."""
    expression: str
    """Its SQL over `f` (the fact) and `a` (its anchor entity); `{fact_entities}` and `{entities}`
    are those tables, `{tenant_fm}` the tenant predicate on the links (bound, as every statement
    reading facts binds %(dataset)s and %(project)s, so a distributed store routes the read to one
    shard: a correlated tenant is not narrowed by Citus; or the scope's names, see `fact_columns`)."""
    decode: Callable[[Any], Any] = _as_is
    """The stored value -> the field's."""
    exported: int = 0
    """Its place in an exported line (`EXPORTED_FIELDS`); 0: not exported (the store sets it again
    on import: the tenant, the anchor's type, the times of learning and of ending)."""


_MENTIONS = """ARRAY(SELECT m.name FROM {fact_entities} fm
             JOIN {entities} m ON m.dataset = fm.dataset AND m.project = fm.project AND m.id = fm.entity_id
             WHERE {tenant_fm} AND fm.fact_id = f.id AND fm.roles & 4 <> 0
             ORDER BY m.name)"""

FACT_COLUMNS: tuple[FactColumn, ...] = (
    FactColumn("id", "f.id", int, exported=1),
    FactColumn("dataset", "f.dataset"),
    FactColumn("project", "f.project"),
    FactColumn("subject", "f.subject", exported=2),
    FactColumn("predicate", "f.predicate", exported=4),
    FactColumn("object", "f.object", exported=5),
    FactColumn("object_type", "f.object_type", exported=6),
    FactColumn("anchor", "a.name", exported=8),
    FactColumn("anchor_type", "a.type"),
    FactColumn("mentions", _MENTIONS, _names, exported=7),
    FactColumn("valid_at", "NULLIF(f.valid_at, " + UNKNOWN_START + ")", exported=9),
    FactColumn("invalid_at", "f.invalid_at", exported=10),
    FactColumn("confidence", "f.confidence", _confidence, exported=11),
    FactColumn("source_quote", "f.source_quote", exported=12),
    FactColumn("created_at", "f.created_at"),
    FactColumn("superseded_by", "f.superseded_by"),
    FactColumn("times_seen", "f.times_seen", int, exported=13),
    FactColumn("expired_at", "f.expired_at"),
)
"""Every field of `Fact`, in the order of the select list (a test holds it to `Fact`)."""

_NAMES = tuple(column.name for column in FACT_COLUMNS)

SUBJECT_TYPE_PLACE = 3
"""The place in an exported line of the subject's type, which is no `Fact` field (the export reads
it beside the fact's columns, `statements.ExportedFact`)."""

EXPORTED_FIELDS: tuple[str, ...] = tuple(
    name
    for _, name in sorted(
        [(column.exported, column.name) for column in FACT_COLUMNS if column.exported]
        + [(SUBJECT_TYPE_PLACE, "subject_type")]
    )
)
"""The keys of an exported fact line after its "kind", in order (the export format's order, older
than the select list's, so each exported column says its place): what `import_jsonl` reads back."""


def fact_columns(
    schema: str, *, tables: Mapping[str, sql.Composable] | None = None, named: Scope | None = None
) -> sql.Composed:
    """The select list of FACT_COLUMNS, each named by its field. Needs `f` (facts) and `a` (the
    anchor entity) in the FROM clause. For a recall's kept read, whose plan is kept: the links are
    read from `tables` (`layouts.access.ScopeAccess.tables`: the DEFAULT partitions, a moved
    scope's leaf, a worker's shard), and with `named` the tenant is the scope's names, so that the
    plan holds no other tenant's partitions (`store.layout`)."""
    parts = dict(tables) if tables is not None else table_refs(schema)
    parts["tenant_fm"] = tenant_predicate("fm") if named is None else scope_predicate(named, "fm")
    return sql.SQL(", ").join(
        sql.SQL("{} AS {}").format(sql.SQL(column.expression).format(**parts), sql.Identifier(column.name))
        for column in FACT_COLUMNS
    )


def fact_from(columns: Mapping[str, Any]) -> Fact:
    """A Fact from its columns by name (other columns are ignored)."""
    return Fact(**{column.name: column.decode(columns[column.name]) for column in FACT_COLUMNS})


_DECODED = tuple((column.name, column.decode) for column in FACT_COLUMNS if column.decode is not _as_is)
"""The columns whose stored value is not the field's, with their decoders."""


def decode_fact(row: Sequence[Any]) -> Fact:
    """A Fact from a tuple row of exactly `fact_columns` (as `fact_from`, the other columns taken as
    they are: a recall decodes a row per kept fact)."""
    columns = dict(zip(_NAMES, row, strict=True))
    for name, decode in _DECODED:
        columns[name] = decode(columns[name])
    return Fact(**columns)
