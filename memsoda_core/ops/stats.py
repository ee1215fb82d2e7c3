"""Per-scope counts (operation)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from memsoda_core.runner.steps import Operation, execute_as
from memsoda_core.store import statements as sql_store
from memsoda_core.store.info import StoreInfo


def stats(info: StoreInfo, dataset: str | None, project: str | None) -> Operation[list[dict[str, Any]]]:
    """`sql_store.ScopeCounts` of the scopes matching `dataset` / `project` (None: any), as dicts."""
    rows = yield from execute_as(
        sql_store.ScopeCounts, sql_store.stats(info.schema), {"dataset": dataset, "project": project}
    )
    return [asdict(row) for row in rows]
