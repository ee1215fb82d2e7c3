"""Per-scope counts (operation)."""

from __future__ import annotations

from typing import Any

from memsoda_core.runner.steps import (
    Execute,
    Operation,
)
from memsoda_core.store import statements as sql_write
from memsoda_core.store.info import StoreInfo


def stats(info: StoreInfo, dataset: str | None, project: str | None) -> Operation[list[dict[str, Any]]]:
    rows = yield Execute(sql_write.stats(info.schema), {"dataset": dataset, "project": project})
    keys = ("dataset", "project", "facts", "live_facts", "entities", "episodes")
    return [dict(zip(keys, row, strict=True)) for row in rows]
