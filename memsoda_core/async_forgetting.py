"""Forgetting by source and by age, and the items' TTL sweep: `AsyncMemory`'s methods for them
(`memsoda_core.lifetime`), apart so each module stays one job. `ForgettingMethods` (in
`sync_forgetting.py`) is generated from this module by `tools/async_to_sync.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, TypeVar

from memsoda_core.items_base import ItemsBase
from memsoda_core.lifetime import ForgetReport, RetentionReport, RetentionRule
from memsoda_core.runner.steps import Operation

T = TypeVar("T")


class AsyncForgettingMethods(ItemsBase):
    """`AsyncMemory`'s forget_source, maintain and retention, sweep_items (it supplies `_run`)."""

    async def _run(self, op: Operation[T], *, read_only: bool = False) -> T:
        raise NotImplementedError  # AsyncMemory's runner performs the operation

    async def forget_source(
        self,
        *,
        dataset: str,
        project: str,
        thread_id: str | None = None,
        message_ids: Sequence[str] | None = None,
    ) -> ForgetReport:
        """Forget what `remember` learned from thread `thread_id`, from messages `message_ids`, or
        from those messages of that thread, in one transaction: a fact learned only from them is
        deleted (with the items that refer to it); a fact also learned elsewhere stays and keeps
        its other sources. Forgetting a whole thread deletes its episodes too. A fact that a
        deleted one had superseded keeps its end as history. Returns what went."""
        return await self._run(self._forget_source_op(dataset, project, thread_id, message_ids))

    async def maintain(self, *, retention: bool = True) -> list[str]:
        """Purge the facts the scopes' retention rules have outlived (`apply_retention`; not with
        `retention=False`), refresh statistics and build the tenant indexes of every
        dataset/project at or above `tenant_index_min_facts` facts that lacks them (writes through
        memsoda do this on their own; call it after loading rows with COPY). Returns the names of
        the indexes built."""
        return await self._run(self._maintain_op(retention))

    async def set_retention(
        self,
        *,
        dataset: str,
        project: str,
        max_age: timedelta | None,
        purge: str = "ended",
        predicate: str | None = None,
    ) -> list[RetentionRule]:
        """Keep the scope's facts (of `predicate` alone, case folded, when given: that rule
        overrides the scope's for it) for `max_age`; `max_age=None` removes the rule. `purge`:
        "ended" purges the facts that ended more than `max_age` ago (counted from the later of the
        end and when memory learned of it); "all" purges every fact memory learned more than
        `max_age` ago, live or not. `maintain` / `apply_retention` purge. Returns the scope's rules."""
        return await self._run(self._set_retention_op(dataset, project, max_age, purge, predicate))

    async def retention(self, *, dataset: str, project: str) -> list[RetentionRule]:
        """The scope's retention rules: its own (predicate None) first, then by predicate."""
        return await self._run(self._retention_op(dataset, project), read_only=True)

    async def apply_retention(self, *, at: Any = None) -> RetentionReport:
        """Purge, in every scope with retention rules, the facts they have outlived at `at`
        (default: now), in one transaction, as `forget_source` deletes facts (their items go too;
        a fact they had superseded keeps its end). Returns what went."""
        return await self._run(self._apply_retention_op(at))

    async def sweep_items(self, *, project: str | None = None, at: Any = None) -> int:
        """Delete the items (of `project`, else of every project) whose TTL ran out by `at`
        (default: now), each with the facts it leaves no item referring to, its past texts
        included, in one transaction. Returns how many items went."""
        return await self._run(self._sweep_items_op(project, at))
