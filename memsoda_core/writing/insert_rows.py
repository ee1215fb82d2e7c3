"""Run an insert of `writing.inserts` in the form its store's layout writes (`Layout.write_form`;
operations): one statement of arrays, or VALUES in chunks of `ROWS_PER_STATEMENT` rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from memsoda_core.layouts import layout_of
from memsoda_core.runner.steps import Operation, Row, execute, execute_as
from memsoda_core.store.info import StoreInfo
from memsoda_core.writing.inserts import TableInsert, chunks

R = TypeVar("R")


def insert_rows(info: StoreInfo, insert: TableInsert, params: Mapping[str, Any]) -> Operation[list[Row]]:
    """Write `params`' rows (the columns as arrays) with `insert`, in the store's form."""
    rows: list[Row] = []
    for statement, chunk in chunks(insert, info.schema, layout_of(info).write_form, params):
        rows += yield from execute(statement, chunk)
    return rows


def insert_rows_as(
    shape: type[R], info: StoreInfo, insert: TableInsert, params: Mapping[str, Any]
) -> Operation[list[R]]:
    """`insert_rows` with each row built as `shape(**columns)` (`steps.execute_as`)."""
    rows: list[R] = []
    for statement, chunk in chunks(insert, info.schema, layout_of(info).write_form, params):
        rows += yield from execute_as(shape, statement, chunk)
    return rows
