"""One operation on a connection of its own, before a store is opened (sync; `AsyncMemory.open` runs it in a thread)."""

from __future__ import annotations

from typing import TypeVar

import psycopg

from memsoda_core.runner.policy import CONNECTION_KWARGS, translate_db_error
from memsoda_core.runner.steps import Operation
from memsoda_core.runner.sync_runner import Runner

T = TypeVar("T")


def run_once(dsn: str, op: Operation[T]) -> T:
    """Drive `op` (statements only) on a new connection to `dsn`, closed after; database errors
    raise as memsoda errors."""
    try:
        with psycopg.connect(dsn, **CONNECTION_KWARGS) as conn:
            return Runner.run_on(conn, op)
    except psycopg.Error as exc:
        raise translate_db_error(exc) from exc
