"""Index DDL run outside the operation's transaction, and the session locks around it."""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql

from memsoda_core.runner.steps import Operation, Row, outside_transaction
from memsoda_core.store import tenant_index as sql_tenant_index


def took_lock(locked: list[Row] | None) -> bool:
    """Whether `lock_statement` took the lock (False when it failed)."""
    return bool(locked and locked[0][0])


def index_ddl(statements: Sequence[sql.Composed]) -> Operation[int]:
    """Run index DDL outside the transaction, under the build settings (memory, lock timeout),
    stopping at the first failure (what stopped it, a lock timeout most likely, would stop the
    rest too). Returns how many succeeded."""
    for setting in sql_tenant_index.build_settings():
        yield from outside_transaction(setting)
    succeeded = 0
    for statement in statements:
        if (yield from outside_transaction(statement)) is None:
            break
        succeeded += 1
    for setting in sql_tenant_index.build_settings(reset=True):
        yield from outside_transaction(setting)
    return succeeded
