"""Run an insert of `writing.inserts` in the store's `WriteForm` (operations): one statement of
arrays on one node, or on a distributed store VALUES in chunks of `ROWS_PER_STATEMENT` rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from memsoda_core.runner.steps import Operation, Row, execute, execute_as
from memsoda_core.store.info import StoreInfo
from memsoda_core.writing.inserts import TableInsert, chunks, write_form

R = TypeVar("R")


def insert_rows(info: StoreInfo, insert: TableInsert, params: Mapping[str, Any]) -> Operation[list[Row]]:
    """Write `params`' rows (the columns as arrays) with `insert`, in the store's form."""
    rows: list[Row] = []
    for statement, chunk in chunks(insert, info.schema, write_form(info), params):
        rows += yield from execute(statement, chunk)
    return rows


def insert_rows_as(
    shape: type[R], info: StoreInfo, insert: TableInsert, params: Mapping[str, Any]
) -> Operation[list[R]]:
    """`insert_rows` with each row built as `shape(**columns)` (`steps.execute_as`)."""
    rows: list[R] = []
    for statement, chunk in chunks(insert, info.schema, write_form(info), params):
        rows += yield from execute_as(shape, statement, chunk)
    return rows
