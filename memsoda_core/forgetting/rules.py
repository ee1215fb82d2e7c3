"""Forgetting by source and by age: the values in and out, and their checks (pure).

A source is what `remember` records for each fact it writes (`Memory.sources`): the thread and
the message it came from. Retention is a scope's rule for how long facts are kept: a maximum age,
for the scope or for one predicate, after which ended facts (or all facts) are purged by
`Memory.maintain()` / `Memory.apply_retention()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from memsoda_core import limits
from memsoda_core.errors import ValidationError
from memsoda_core.validation import check_line

Purge = Literal["ended", "all"]
PURGES: tuple[Purge, ...] = ("ended", "all")


@dataclass(frozen=True, kw_only=True)
class ForgetReport:
    """What `Memory.forget_source` deleted: the facts learned only from the forgotten source, the
    facts also learned elsewhere (they stay, with fewer sources), the thread's episodes and the
    items that referred to the deleted facts."""

    facts_deleted: int
    facts_kept: int
    episodes: int
    items: int


@dataclass(frozen=True, kw_only=True)
class RetentionRule:
    """A scope's maximum age of facts: of every predicate (`predicate` None) or of one (case
    folded), which overrides the scope's rule for that predicate. `purge`: "ended" purges the facts
    that ended more than `max_age` ago; "all" purges every fact memory learned more than `max_age`
    ago, live or not."""

    predicate: str | None
    max_age: timedelta
    purge: Purge


@dataclass(frozen=True, kw_only=True)
class RetentionReport:
    """What one retention run purged: facts per (dataset, project), and the items that referred to
    them."""

    facts: int
    items: int
    scopes: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True, kw_only=True)
class MaintainReport:
    """What `Memory.maintain` did: the retention purge (None with `retention=False`); the facts of
    single-valued relations it ended where the relation's next fact starts, facts that were true
    at one valid time, as a store written before the single-valued history fix may hold
    (`ops.overlaps`); the tenant indexes it built; and the facts it left overlapping, each
    starting at the same instant as another of its relation (no order: `ops.overlaps`)."""

    retention: RetentionReport | None
    overlaps_repaired: int
    indexes: tuple[str, ...]
    overlaps_left: int = 0


@dataclass(frozen=True, kw_only=True)
class SourceSelection:
    """A checked source to forget: a thread, message ids, or both (messages of that thread)."""

    thread_id: str | None
    message_ids: tuple[str, ...] | None

    @property
    def params(self) -> dict[str, Any]:
        return {"thread_id": self.thread_id, "message_ids": list(self.message_ids or ())}

    @property
    def shape(self) -> dict[str, bool]:
        """Which parts the statements select on (`learning.sources`)."""
        return {"thread": self.thread_id is not None, "messages": self.message_ids is not None}


def check_source(thread_id: Any, message_ids: Any) -> SourceSelection:
    """A thread id (str), message ids (a list of str), or both; `ValidationError` otherwise."""
    if thread_id is not None and (not isinstance(thread_id, str) or not thread_id):
        raise ValidationError(f"thread_id must be a non-empty str or None, got {thread_id!r}")
    if thread_id is not None and len(thread_id) > limits.MAX_THREAD_ID_CHARS:
        raise ValidationError(f"thread_id is longer than {limits.MAX_THREAD_ID_CHARS} characters")
    ids: tuple[str, ...] | None = None
    if message_ids is not None:
        if isinstance(message_ids, str) or not isinstance(message_ids, Sequence):
            raise ValidationError("message_ids must be a list of str (the message ids `remember` recorded)")
        if not message_ids or len(message_ids) > limits.MAX_BATCH:
            raise ValidationError(f"message_ids must hold 1 to {limits.MAX_BATCH} ids, got {len(message_ids)}")
        if not all(isinstance(i, str) and i for i in message_ids):
            raise ValidationError("every message id must be a non-empty str")
        ids = tuple(sorted(set(message_ids)))
    if thread_id is None and ids is None:
        raise ValidationError("give thread_id, message_ids or both: the source to forget")
    return SourceSelection(thread_id=thread_id, message_ids=ids)


def check_retention(max_age: Any, purge: Any, predicate: Any) -> tuple[timedelta | None, Purge, str | None]:
    """(max_age or None to remove the rule, purge, the case-folded predicate or None)."""
    if max_age is not None and (not isinstance(max_age, timedelta) or max_age <= timedelta(0)):
        raise ValidationError(f"max_age must be a positive datetime.timedelta or None, got {max_age!r}")
    if purge not in PURGES:
        raise ValidationError(f"purge must be one of {', '.join(PURGES)}, got {purge!r}")
    folded = None if predicate is None else check_line(predicate, "predicate", limits.MAX_PREDICATE_CHARS).lower()
    return max_age, purge, folded
