"""Noticing that the store's layout changed under an open Memory (`memsoda distribute` in another
process): the layout generation in `meta` (`store.schema.LAYOUT_GENERATION_KEY`), one primary-key
read of its own before an operation (`AsyncMemory._run`: at most once every `CHECK_EVERY_S`, and
at once after a statement failed), so no transaction is held open while an operation's model runs.

A tenant moved to partitions of its own by another process needs no store-wide generation: its
place is read with its size (`ScopeSize.placed`, per scope), writes name the partitioned tables
and are planned afresh, and a recall that finds nothing where a remembered place said its rows were
reads them where they moved (`ScopeAccess.moved`)."""

from __future__ import annotations

from memsoda_core.runner.steps import Operation, Planning, execute
from memsoda_core.store import schema as ddl

CHECK_EVERY_S = 1.0
"""How often an open Memory reads the generation before an operation: a change is noticed by the
first operation this long after it (a statement failing on the old layout notices it at once).
Meanwhile the old plain forms stay correct under Citus, only slower."""


def current_generation(schema: str) -> Operation[int]:
    """The store's layout generation (0 before schema v12)."""
    rows = yield from execute(ddl.layout_generation_statement(schema), planning=Planning.CACHED)
    return int(rows[0][0]) if rows else 0
