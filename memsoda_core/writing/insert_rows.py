"""A write statement in the form the store routes best (operations): the one-node form
(`INSERT ... SELECT FROM unnest(arrays)`, one statement for any batch) or, on a distributed store,
the VALUES form Citus routes to the tenant's shard (`writing.inserts`), in chunks of
`ROWS_PER_STATEMENT` rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from psycopg import sql

from memsoda_core.runner.steps import Operation, Row, execute, execute_as
from memsoda_core.store.info import StoreInfo
from memsoda_core.writing.inserts import ROWS_PER_STATEMENT, ValuesInsert, row_params

R = TypeVar("R")


def insert_rows(
    info: StoreInfo, one_node: sql.Composed, routed: ValuesInsert, params: Mapping[str, Any]
) -> Operation[list[Row]]:
    """Run `one_node` with `params`, or on a distributed store `routed` over the same rows."""
    rows: list[Row] = []
    for statement, chunk in _forms(info, one_node, routed, params):
        rows += yield from execute(statement, chunk)
    return rows


def insert_rows_as(
    shape: type[R], info: StoreInfo, one_node: sql.Composed, routed: ValuesInsert, params: Mapping[str, Any]
) -> Operation[list[R]]:
    """`insert_rows` with each row built as `shape(**columns)` (`steps.execute_as`)."""
    rows: list[R] = []
    for statement, chunk in _forms(info, one_node, routed, params):
        rows += yield from execute_as(shape, statement, chunk)
    return rows


def _forms(
    info: StoreInfo, one_node: sql.Composed, routed: ValuesInsert, params: Mapping[str, Any]
) -> list[tuple[sql.Composed, Mapping[str, Any]]]:
    if not info.distributed:
        return [(one_node, params)]
    count = len(params[routed.arrays[0]])
    return [
        (routed.statement(info.schema, min(count, start + ROWS_PER_STATEMENT) - start), chunk)
        for start in range(0, count, ROWS_PER_STATEMENT)
        for chunk in [row_params(params, routed.arrays, start, min(count, start + ROWS_PER_STATEMENT))]
    ]
