"""Recall options and their defaults. Frozen: derive variants with `with_overrides` (or
`dataclasses.replace`).

`RecallOptions` holds the knobs of the whole recall and one group per signal, each declared in its
signal's module (`recall.signals.anchor.AnchorOptions`, ...) and taken from the signal registry
(`recall.signals.SignalOptions`, one line per signal): `RecallOptions(anchor=AnchorOptions(hops=1))`.
Every knob has one name, the group's and its own joined by a dot (`"anchor.hops"`; a cross-cutting
knob alone, `"rrf_k"`): `OPTION_NAMES`, what `with_overrides`, `value` and `ADAPTIVE`
take."""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields, replace
from functools import cached_property
from typing import Any

from memsoda_core.errors import ArgumentTypeError, ConfigurationError, LimitError
from memsoda_core.limits import MAX_K
from memsoda_core.option_checks import MAX_OPTION_INT, check_between, check_not_negative, check_types
from memsoda_core.recall.signals import SignalOptions
from memsoda_core.recall.signals.anchor import AnchorOptions
from memsoda_core.recall.signals.conversation import ConversationOptions
from memsoda_core.recall.signals.date import DateOptions
from memsoda_core.recall.signals.entities import EntitiesOptions
from memsoda_core.recall.signals.keyword import KeywordOptions
from memsoda_core.recall.signals.recency import RecentOptions
from memsoda_core.recall.signals.vector import VectorOptions


@dataclass(frozen=True, kw_only=True)
class _Overall:
    """The knobs of the whole recall (`RecallOptions` puts them before the signals' groups)."""

    facts_in_context: int = 8
    min_confidence: float = 0.5
    rrf_k: int = 60
    min_relevance: float | None = None
    """When the query is less relevant than this, the recall finds nothing (no facts, context "").
    Relevance is on a scale the embedder cannot move (`recall.relevance`): how far the query's
    nearest fact stands above its typical one among the scope's latest facts, in units of how far
    a fact's nearest neighbour stands above a typical pair of them (1: as much); what each floor
    empties, per embedder, is in bench/RESULTS.md. None (the default): off. Only a recall with a
    query embedding, of a scope with at least 3 facts, is judged."""
    as_of_from_question: bool = True
    """A question asking what held in a past window ("where did I live in 2019?") reads memory as
    of the window's end, unless the caller gives `as_of` or `known_at` (`recall.asof`)."""
    episodes_k: int = 3
    embed_timeout_s: float = 10.0
    """An embedder slower than this makes the recall degrade instead of waiting."""


@dataclass(frozen=True, kw_only=True)
class RecallOptions(SignalOptions, _Overall):
    """Every knob of a recall: the cross-cutting ones (`facts_in_context`, `min_confidence`,
    `rrf_k`, `min_relevance`, `as_of_from_question`, `episodes_k`, `embed_timeout_s`), then one
    group per signal, each field named like its group's `group` (`vector`, `anchor`, `entities`,
    `keyword`, `date`, `conversation`, `recent`: the signal registry, `recall.signals.SignalOptions`).
    `facts_in_context`, `min_confidence`, `rrf_k`, `anchor.vector_top_k` and `anchor.vector_min`
    are also keyword arguments of `Memory.recall`."""

    def __post_init__(self) -> None:
        check_types(self)
        for name, group in _GROUPS.items():
            if not isinstance(getattr(self, name), group):
                raise ArgumentTypeError(f"{name} must be {group.__name__}(...), got {getattr(self, name)!r}")
        check_between("facts_in_context (k)", self.facts_in_context, 1, MAX_K)
        check_between("min_confidence", self.min_confidence, 0, 1)
        check_not_negative("rrf_k", self.rrf_k)
        check_between("min_relevance", self.min_relevance, 0, math.inf)
        check_not_negative("episodes_k", self.episodes_k)
        if self.embed_timeout_s <= 0:
            raise LimitError(f"embed_timeout_s must be positive, got {self.embed_timeout_s}")

    def value(self, name: str) -> Any:
        """The value of the option named `name` (`"anchor.hops"`, `"rrf_k"`)."""
        group, knob = _split(name)
        return getattr(getattr(self, group), knob) if knob else getattr(self, group)

    def with_overrides(self, overrides: Mapping[str, Any]) -> RecallOptions:
        """A copy with the named options replaced (`{"anchor.hops": 1, "rrf_k": 30}`), checked as
        when made; an unknown name raises ConfigurationError listing the known ones."""
        top: dict[str, Any] = {}
        grouped: dict[str, dict[str, Any]] = {}
        for name, value in overrides.items():
            group, knob = _split(name)
            if knob:
                grouped.setdefault(group, {})[knob] = value
            else:
                top[name] = value
        for group, knobs in grouped.items():
            top[group] = replace(getattr(self, group), **knobs)
        return replace(self, **top) if top else self

    def left_to_memory(self) -> tuple[str, ...]:
        """The options at None, which the memory chooses from its statistics (`ADAPTIVE`)."""
        return self._left_to_memory

    @cached_property
    def _left_to_memory(self) -> tuple[str, ...]:  # once per options object: each recall asks twice
        return tuple(name for name in ADAPTIVE if self.value(name) is None)

    def filled(self, preset: RecallOptions) -> RecallOptions:
        """A copy with the options left to the memory taken from `preset`; the others stay."""
        left = self.left_to_memory()
        return self.with_overrides({name: preset.value(name) for name in left}) if left else self


_GROUPS: dict[str, Any] = {f.name: f.default_factory for f in fields(RecallOptions) if f.default_factory is not MISSING}
"""Field name -> its options group, whose `group` is that name (its checks' messages say it)."""

OPTION_NAMES: tuple[str, ...] = tuple(
    f"{f.name}.{knob.name}" if f.name in _GROUPS else f.name
    for f in fields(RecallOptions)
    for knob in (fields(_GROUPS[f.name]) if f.name in _GROUPS else (f,))
)
"""Every option's one name, in field order: `facts_in_context`, ..., `anchor.hops`, ..."""


def _split(name: str) -> tuple[str, str]:
    """(group, knob) of a known option name; ("rrf_k", "") for a cross-cutting one."""
    if name not in _KNOWN:
        text = str(name)
        near = difflib.get_close_matches(text.replace("_", ".", 1), OPTION_NAMES, n=1) or difflib.get_close_matches(
            text, OPTION_NAMES, n=1
        )
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ConfigurationError(f"unknown recall option {name!r}{hint}; known: {', '.join(OPTION_NAMES)}")
    group, _, knob = name.partition(".")
    return group, knob


_KNOWN = frozenset(OPTION_NAMES)

ADAPTIVE = ("recent.candidates", "keyword.min_terms", "anchor.name_share")
"""The options a memory chooses when the caller leaves them at None: the ones whose best value
depends on the kind of memory (`recall.adaptive`)."""


DEFAULT_OPTIONS = RecallOptions()
"""Every option at its default: the `ADAPTIVE` ones left to the memory."""

GENERAL_OPTIONS = RecallOptions(
    recent=RecentOptions(candidates=0), keyword=KeywordOptions(min_terms=2), anchor=AnchorOptions(name_share=0.5)
)
"""For a memory of facts about many named things (chats between named speakers, a knowledge base):
no recency list, two matched terms for a keyword hit, the name test at half the facts. What the
memory chooses unless its statistics show a first-person memory (`recall.adaptive`), and the
defaults before the choice (set, so nothing is left to choose)."""

FIRST_PERSON_OPTIONS = RecallOptions(
    recent=RecentOptions(candidates=50), keyword=KeywordOptions(min_terms=1), anchor=AnchorOptions(name_share=0.9)
)
"""For a memory of one user's own sessions with an assistant (a personal assistant's memory): its
later notes restate and update earlier ones, its questions are the user's long messages, and the
notes name few things but the user. So the 50 most recent live facts are fused as a list of their
own (the latest notes are what a message goes on from); one matched word places a fact in the
keyword list (ranked by IDF: a rare word counts, a common one ranks low); and a capitalised word
anchors only where nearly every note holding it is linked to it. On memories of facts about many
named things the recency list buries what only the vector list finds, so the memory takes these
only when its statistics show a memory of one person's notes (`recall.adaptive`; bench/RESULTS.md,
section 6)."""


__all__ = [
    "ADAPTIVE",
    "DEFAULT_OPTIONS",
    "FIRST_PERSON_OPTIONS",
    "GENERAL_OPTIONS",
    "MAX_OPTION_INT",
    "OPTION_NAMES",
    "AnchorOptions",
    "ConversationOptions",
    "DateOptions",
    "EntitiesOptions",
    "KeywordOptions",
    "RecallOptions",
    "RecentOptions",
    "VectorOptions",
]
