"""The plan and parameters of each recall a bench makes, to rebuild and time its statements."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from memsoda_core.layouts.access import ScopeAccess
from memsoda_core.recall import operation
from memsoda_core.recall.signals import RecallPlan
from memsoda_core.runner.steps import Execute
from memsoda_core.store.info import StoreInfo


@contextmanager
def captured_recalls() -> Iterator[dict[str, Any]]:
    """A dict holding the latest recall's `plan` and `params` while the block runs, filled in at
    every recall of this process."""
    seen: dict[str, Any] = {}
    executes = operation._executes

    def spy(
        info: StoreInfo, plan: RecallPlan, access: ScopeAccess, params: dict[str, Any], scope_facts: int
    ) -> list[Execute]:
        seen.update(plan=plan, params=params)
        return executes(info, plan, access, params, scope_facts)

    # the one place a recall's plan and parameters are both at hand; no public hook gives them
    operation._executes = spy
    try:
        yield seen
    finally:
        operation._executes = executes
