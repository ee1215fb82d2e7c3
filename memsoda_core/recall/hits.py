"""The hit row: one (signal, fact) pair a recall statement returns, decoded by column name.

A statement names only the detail columns its own signals fill (see `statements.hits_statement`);
the others are None. Columns are matched to fields by name once per result, then each row is
built by position, so decoding costs about what a tuple does (bench/RESULTS.md, "Named hit rows").
A statement that also reads the facts' columns (`statements.kept_hits_statement`) has them last,
named as `store.fact_columns` names them: they go to `HitRow.fact`, as one tuple.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from operator import itemgetter
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, get_args, get_type_hints

from psycopg.rows import RowMaker, no_result

from memsoda_core.models import Signal
from memsoda_core.store.fact_columns import FACT_COLUMNS

if TYPE_CHECKING:
    from psycopg._cursor_base import BaseCursor  # the type psycopg's own row factories take


class HitRow(NamedTuple):
    """One hit. The four first columns come from every signal; each later one from the signals
    that declare it (`SignalSpec.details`), annotated with its SQL type (the NULL the others of the
    same statement put there)."""

    signal: Signal
    fact_id: int
    rank: int
    """1-based, in the signal's own list."""
    valid_at_us: float
    """valid_at in microseconds since the epoch: fusion's recency tie-break (a number decodes
    faster than a timestamp and compares the same; exact below 2**53 us, year 2255; an unknown
    start is -inf, the least recent)."""
    hop: Annotated[int | None, "int"] = None
    via: Annotated[str | None, "text"] = None
    via_named: Annotated[bool | None, "boolean"] = None
    via_similarity: Annotated[float | None, "float8"] = None
    similarity: Annotated[float | None, "float8"] = None
    matched: Annotated[list[str] | None, "text[]"] = None
    began: Annotated[bool | None, "boolean"] = None
    period: Annotated[str | None, "text"] = None
    fact: tuple[Any, ...] | None = None
    """The fact's columns (`store.fact_columns.decode_fact` reads them) when the statement read them
    with its hits (`statements.kept_hits_statement`); None: read after fusion."""


COMMON_COLUMNS = HitRow._fields[:4]
"""The columns every signal's hit rows have, from its `<name>_hits` CTE's fact_id, rank and
valid_at."""


_HIT_COLUMNS = HitRow._fields[: HitRow._fields.index("fact")]
"""The fields a statement's hit columns fill."""

FACT_NAMES = tuple(column.name for column in FACT_COLUMNS)
"""The names of the fact columns, last in a statement that reads them with its hits."""


def _detail_types() -> dict[str, str]:
    hints = get_type_hints(HitRow, include_extras=True)
    return {name: get_args(hints[name])[1] for name in _HIT_COLUMNS[len(COMMON_COLUMNS) :]}


DETAIL_TYPES: dict[str, str] = _detail_types()
"""Detail column -> its SQL type."""


@lru_cache(maxsize=64)
def _maker(names: tuple[str, ...]) -> RowMaker[HitRow]:
    facts = len(names) - len(FACT_NAMES) if names[-len(FACT_NAMES) :] == FACT_NAMES else len(names)
    hits = names[:facts]
    if not set(COMMON_COLUMNS) <= set(hits) <= set(_HIT_COLUMNS) or len(set(hits)) != len(hits):
        raise ValueError(f"not the columns of hit rows: {names}")
    missing = len(names)  # the None appended to each row
    fields = [hits.index(name) if name in hits else missing for name in _HIT_COLUMNS]
    make = HitRow._make
    if facts == len(names):
        pick = itemgetter(*fields, missing)  # no fact columns

        def hit_row(values: Sequence[Any]) -> HitRow:
            return make(pick((*values, None)))

        return hit_row
    pick = itemgetter(*fields)

    def hit_row_with_fact(values: Sequence[Any]) -> HitRow:  # a NULL id: a fact whose columns were not read
        return make((*pick((*values, None)), None if values[facts] is None else tuple(values[facts:])))

    return hit_row_with_fact


@lru_cache(maxsize=64)
def _maker_of_fields(fields: tuple[bytes | None, ...]) -> RowMaker[HitRow]:
    """`_maker` of a result's column names as libpq gives them (decoded once per set of names)."""
    return _maker(tuple(bytes(name or b"").decode() for name in fields))


def hit_rows(cursor: BaseCursor[Any, Any]) -> RowMaker[HitRow]:
    """psycopg row factory: each row of a recall statement as a `HitRow`, by column name (read from
    the result itself: `cursor.description` builds an object per column, ~30 of them, at each
    recall)."""
    result = cursor.pgresult
    if result is None or not result.nfields:
        return no_result
    return _maker_of_fields(tuple(map(result.fname, range(result.nfields))))
