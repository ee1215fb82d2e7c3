"""The recall signals, one module each, and the one ordered registry everything else reads.

The order is fusion's order of a fact's hits and the order of the hit rows within a statement;
`SignalSpec.statement` groups the signals into the statements a recall runs at once. To add a
signal, see docs/ARCHITECTURE.md, "Adding a signal".
"""

from __future__ import annotations

from collections.abc import Sequence

from memsoda_core.recall.signals import anchor, conversation, date, keyword, recency, vector
from memsoda_core.recall.signals.spec import RecallPlan, SharedCtes, SignalInputs, SignalSpec

REGISTRY: tuple[SignalSpec, ...] = (
    vector.SIGNAL,
    anchor.SIGNAL,
    keyword.SIGNAL,
    date.SIGNAL,
    conversation.SIGNAL,
    recency.SIGNAL,
)

SIGNAL_NAMES: tuple[str, ...] = tuple(spec.name for spec in REGISTRY)

FULL_PLAN = RecallPlan(query=True, embedding=True)
"""A recall with a query and its embedding."""


def by_name(registry: Sequence[SignalSpec] = REGISTRY) -> dict[str, SignalSpec]:
    """Signal name -> its spec."""
    return {spec.name: spec for spec in registry}


def signal_order(registry: Sequence[SignalSpec] = REGISTRY) -> dict[str, int]:
    """Signal name -> its position in the registry."""
    return {spec.name: position for position, spec in enumerate(registry)}


def planned_signals(plan: RecallPlan, registry: Sequence[SignalSpec] = REGISTRY) -> tuple[str, ...]:
    """The signals `plan` runs, in registry order."""
    return tuple(spec.name for spec in registry if spec.runs(plan))


QUERY_SIGNALS: tuple[str, ...] = planned_signals(FULL_PLAN)
"""The signals of a recall with a query and its embedding (what the CLI and the demo show)."""


def statement_groups(registry: Sequence[SignalSpec] = REGISTRY) -> tuple[tuple[str, ...], ...]:
    """The signals of each recall statement, statements by number, signals in registry order."""
    numbers = sorted({spec.statement for spec in registry})
    return tuple(tuple(spec.name for spec in registry if spec.statement == n) for n in numbers)


__all__ = [
    "FULL_PLAN",
    "QUERY_SIGNALS",
    "REGISTRY",
    "SIGNAL_NAMES",
    "RecallPlan",
    "SharedCtes",
    "SignalInputs",
    "SignalSpec",
    "by_name",
    "planned_signals",
    "signal_order",
    "statement_groups",
]
