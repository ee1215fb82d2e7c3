"""The recall signals, one module each, and the one ordered registry everything else reads.

The registry is `SignalOptions`: one line per signal, its options group (its knobs, declared in its
module) carrying its spec, so a signal is registered and its knobs are typed `RecallOptions` fields
in the one line (`options.RecallOptions` takes its groups from it). Its order is fusion's order of
a fact's hits and the order of the hit rows within a statement; `SignalSpec.statement` groups the
signals into the statements a recall runs at once. To add a signal, see docs/ARCHITECTURE.md,
"Adding a signal".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from memsoda_core.recall.signals import anchor, conversation, date, entities, keyword, recency, vector
from memsoda_core.recall.signals.spec import RecallPlan, RecallRequest, SharedCtes, SignalSpec, signal


@dataclass(frozen=True, kw_only=True)
class SignalOptions:
    """The registry, in fusion's order of a fact's hits: one options group per signal (`signal`),
    and the groups no one signal owns (plain fields). `RecallOptions` holds these groups."""

    vector: vector.VectorOptions = signal(vector.SIGNAL, vector.VectorOptions)
    anchor: anchor.AnchorOptions = signal(anchor.SIGNAL, anchor.AnchorOptions)
    entities: entities.EntitiesOptions = field(default_factory=entities.EntitiesOptions)
    """When an entity is a hub, for the anchor and keyword signals."""
    keyword: keyword.KeywordOptions = signal(keyword.SIGNAL, keyword.KeywordOptions)
    date: date.DateOptions = signal(date.SIGNAL, date.DateOptions)
    conversation: conversation.ConversationOptions = signal(conversation.SIGNAL, conversation.ConversationOptions)
    recent: recency.RecentOptions = signal(recency.SIGNAL, recency.RecentOptions)


REGISTRY: tuple[SignalSpec, ...] = tuple(f.metadata["signal"] for f in fields(SignalOptions) if "signal" in f.metadata)

SIGNAL_NAMES: tuple[str, ...] = tuple(spec.name for spec in REGISTRY)


def by_name(registry: Sequence[SignalSpec] = REGISTRY) -> dict[str, SignalSpec]:
    """Signal name -> its spec."""
    return {spec.name: spec for spec in registry}


def signal_order(registry: Sequence[SignalSpec] = REGISTRY) -> dict[str, int]:
    """Signal name -> its position in the registry."""
    return {spec.name: position for position, spec in enumerate(registry)}


def shared_ctes(registry: Sequence[SignalSpec] = REGISTRY) -> tuple[SharedCtes, ...]:
    """The CTEs the signals of `registry` share, each once, in the order they first require them."""
    return tuple(dict.fromkeys(required for spec in registry for required in spec.requires))


def planned_signals(plan: RecallPlan, registry: Sequence[SignalSpec] = REGISTRY) -> tuple[str, ...]:
    """The signals `plan` runs, in registry order."""
    return tuple(spec.name for spec in registry if spec.name in plan.signals)


def plan_for(request: RecallRequest, registry: Sequence[SignalSpec] = REGISTRY) -> RecallPlan:
    """The statements' shape for `request`: the signals whose spec runs for it, and the flags their
    CTEs read (`known`: read as memory knew it at `known_at`; `within`: only the facts given, read
    exactly). Hops do not matter with neither a query nor a vector (recency alone: one statement)."""
    query, embedding = request.query is not None, request.embedding is not None
    within = request.within is not None
    return RecallPlan(
        query=query,
        embedding=embedding,
        hops=request.options.anchor.hops if query or embedding else 2,
        known=request.known_at is not None,
        signals=frozenset(spec.name for spec in registry if spec.runs(request)),
        exact=within,
        within=within,
    )


def statement_groups(registry: Sequence[SignalSpec] = REGISTRY) -> tuple[tuple[str, ...], ...]:
    """The signals of each recall statement, statements by number, signals in registry order."""
    numbers = sorted({spec.statement for spec in registry})
    return tuple(tuple(spec.name for spec in registry if spec.statement == n) for n in numbers)


__all__ = [
    "REGISTRY",
    "SIGNAL_NAMES",
    "RecallPlan",
    "RecallRequest",
    "SharedCtes",
    "SignalOptions",
    "SignalSpec",
    "by_name",
    "plan_for",
    "planned_signals",
    "shared_ctes",
    "signal",
    "signal_order",
    "statement_groups",
]
