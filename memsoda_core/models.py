"""Frozen value types: what goes into memory and what comes out of a recall."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import date, datetime
from typing import Any, Literal, TypeAlias, TypedDict

Signal: TypeAlias = str
"""A ranked list a recall can fuse: the name of a signal in `recall.signals.REGISTRY` (`SIGNAL_NAMES`:
vector, anchor, keyword, date, conversation, recent), so a new signal needs no edit here. Results
are built by looking each hit's signal up in the registry (`recall.result`): an unknown name fails
there. `recent` only appears when there is no query, when the memory fuses a recency list, or when
the embedder failed and recall degraded to keyword + named anchors + recency."""

IncludeOption = Literal["raw", "episodes", "synthesis"]

LITERAL = "LITERAL"
"""`object_type` of an object that is a value rather than an entity."""


class ScopeArgs(TypedDict):
    """One tenant's `dataset=` and `project=` keyword arguments, spread into a call:
    `memory.recall(query, **scope)`."""

    dataset: str
    project: str


TimeInput: TypeAlias = datetime | date | str
"""A time as memsoda accepts it: an aware datetime (a naive one is read as UTC), a date (its
midnight, UTC) or an ISO-8601 string (`2026-08-16`, `2026-08-16T09:30:00Z`)."""


@dataclass(frozen=True, kw_only=True)
class FactInput:
    """A fact to store. Strings are taken as given; names are normalized on write.

    `anchor` defaults to the object when it is an entity, else the subject.
    `valid_at=None` means no known start: true for as long as memory knows (live at any `as_of`
    before its end); `invalid_at=None` means "still true".
    Dates may be `datetime`, `date` or ISO-8601 strings; naive values are read as UTC.
    """

    subject: str
    predicate: str
    object: str
    subject_type: str = "OTHER"
    object_type: str = "OTHER"
    mentions: Sequence[str] = ()
    anchor: str | None = None
    valid_at: TimeInput | None = None
    invalid_at: TimeInput | None = None
    confidence: float = 1.0
    source_quote: str | None = None
    single_valued: bool = False
    """The relation (subject, predicate) holds one value at a time: this fact, if new, ends the
    live value (as a predicate registered with `set_single_valued` does for every write)."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> FactInput:
        """Build from a dict with the same keys; unknown keys are rejected by the validator."""
        return cls(**dict(data))


@dataclass(frozen=True, kw_only=True)
class EpisodeInput:
    """A cross-thread summary to store."""

    text: str
    thread_id: str | None = None
    created_at: TimeInput | None = None


@dataclass(frozen=True, kw_only=True)
class Fact:
    """A stored fact."""

    id: int
    dataset: str
    project: str
    subject: str
    predicate: str
    object: str
    object_type: str
    anchor: str
    anchor_type: str
    mentions: tuple[str, ...]
    valid_at: datetime | None
    """When it became true; None: no known start (true for as long as memory knows)."""
    invalid_at: datetime | None
    confidence: float
    source_quote: str | None
    created_at: datetime
    """When memory learned it (transaction time)."""
    superseded_by: int | None = None
    """The fact that replaced this one (its chain: `history`)."""
    times_seen: int = 1
    """How often this fact was written (equal writes resolve to it)."""
    expired_at: datetime | None = None
    """When memory learned that it ended (`invalidate`, `supersede`, a new single-valued value);
    None while it is open, or when it was written with its end already known."""

    def as_known_at(self, at: datetime) -> Fact:
        """The fact as memory held it at `at`: an end memory recorded after `at` is left out."""
        if self.expired_at is None or self.expired_at <= at:
            return self
        return replace(self, invalid_at=None, superseded_by=None, expired_at=None)

    @property
    def text(self) -> str:
        """`subject predicate object`, as rendered."""
        return f"{self.subject} {self.predicate} {self.object}"


@dataclass(frozen=True, kw_only=True)
class SignalHit:
    """Why one signal put a fact on its list."""

    signal: Signal
    rank: int
    """1-based position in that signal's ranked list."""
    reason: str
    similarity: float | None = None


@dataclass(frozen=True, kw_only=True)
class ScoredFact:
    """A fact with its fused score and, per signal, the rank and reason that earned it."""

    fact: Fact
    score: float
    hits: tuple[SignalHit, ...]

    @property
    def ranks(self) -> dict[str, int]:
        """Signal name -> 1-based rank in that signal's list."""
        return {hit.signal: hit.rank for hit in self.hits}

    @property
    def reasons(self) -> dict[str, str]:
        """Signal name -> why that signal picked the fact."""
        return {hit.signal: hit.reason for hit in self.hits}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serializable data (dates as ISO-8601 strings)."""
        fact = asdict(self.fact)
        fact["mentions"] = list(self.fact.mentions)
        fact["text"] = self.fact.text
        for key in ("valid_at", "invalid_at", "created_at", "expired_at"):
            value = fact[key]
            fact[key] = value.isoformat() if value is not None else None
        fact["score"] = self.score
        fact["ranks"] = self.ranks
        fact["reasons"] = self.reasons
        return fact


@dataclass(frozen=True, kw_only=True)
class Entity:
    """An entity named by rendered facts."""

    name: str
    type: str


@dataclass(frozen=True, kw_only=True)
class Episode:
    """A stored episode summary, with its similarity to the query when recalled."""

    id: int
    thread_id: str | None
    text: str
    created_at: datetime
    similarity: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serializable data."""
        data = asdict(self)
        data["created_at"] = self.created_at.isoformat()
        return data


@dataclass(frozen=True, kw_only=True)
class ScopeStats:
    """What a scope's latest facts show of the kind of memory it is (`recall.scope_stats`): read
    from its `sampled` most recently written facts, live or not, so it does not depend on the time
    a recall reads at."""

    sampled: int
    """Facts in the sample (the scope's latest `recall.scope_stats.SAMPLE_FACTS`, or all it has)."""
    subject_share: float
    """The share of them whose subject is the sample's most common subject (the user, in a
    memory of one person)."""
    lexemes_per_fact: float
    """Their mean count of distinct search lexemes (subject, predicate and object): a triple has a
    few, a note written as a sentence many."""
    restated_share: float
    """The share of them written again since (`times_seen` > 1: a later note equal to it)."""


@dataclass(frozen=True, kw_only=True)
class FusionChoice:
    """How a recall fused its lists when the caller left some options to the memory
    (`RecallOptions` fields at None; `recall.adaptive`)."""

    preset: Literal["general", "first_person"]
    """Whose values the memory took: `GENERAL_OPTIONS` or `FIRST_PERSON_OPTIONS`."""
    chosen: tuple[str, ...]
    """The options the memory chose (those the caller left at None), by name (`"recent.candidates"`:
    `options.ADAPTIVE`); the caller's stand."""
    reason: str
    stats: ScopeStats | None
    """What the choice was made from; None for a recall without a query (nothing to choose)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serializable data."""
        return {
            "preset": self.preset,
            "chosen": list(self.chosen),
            "reason": self.reason,
            "stats": None if self.stats is None else asdict(self.stats),
        }


@dataclass(frozen=True, kw_only=True)
class RecallResult:
    """What `recall` returns. Guard for `context == ""`: it means nothing matched, and
    `scope_empty` says when that is because the dataset/project holds no facts at all."""

    context: str
    facts: tuple[ScoredFact, ...]
    entities: tuple[Entity, ...]
    episodes: tuple[Episode, ...] = ()
    synthesis: str | None = None
    degraded: bool = False
    degraded_reason: str | None = None
    timings_ms: Mapping[str, float] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)
    """Optional parts that failed without failing the recall, e.g. `{"synthesis": "..."}`."""
    as_of: datetime | None = None
    """The valid time memory was read at: the caller's `as_of` (or `known_at`), or the one taken
    from a question about what held then (`as_of_reason`); None: the time of the recall."""
    as_of_reason: str | None = None
    """Why `as_of` was taken from the question (`RecallOptions.as_of_from_question`); else None."""
    scope_empty: bool = False
    """The dataset/project holds no facts (never written, a misspelt name, or all forgotten); a
    scope whose facts exist but did not match, or had ended, is not empty."""
    fusion: FusionChoice | None = None
    """Which fusion the memory chose from its statistics for the options the caller left to it;
    None when the caller set them all."""
    relevance: float | None = None
    """The query's relevance (`RecallOptions.min_relevance`, `recall.relevance`: how far its nearest
    fact stands above its typical one, in units of the scope's own gap between a fact's nearest
    neighbour and a typical pair), measured when the caller set `min_relevance` and the scope has
    at least 3 facts; else None."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serializable data."""
        return {
            "context": self.context,
            "facts": [fact.to_dict() for fact in self.facts],
            "entities": [asdict(entity) for entity in self.entities],
            "episodes": [episode.to_dict() for episode in self.episodes],
            "synthesis": self.synthesis,
            "degraded": self.degraded,
            "degraded_reason": self.degraded_reason,
            "timings_ms": dict(self.timings_ms),
            "errors": dict(self.errors),
            "as_of": None if self.as_of is None else self.as_of.isoformat(),
            "as_of_reason": self.as_of_reason,
            "scope_empty": self.scope_empty,
            "fusion": None if self.fusion is None else self.fusion.to_dict(),
            "relevance": self.relevance,
        }


@dataclass(frozen=True, kw_only=True)
class FactPage:
    """A page of `list_facts`: the facts in id order, and the cursor of the next page (pass it as
    `after=`), None on the last page."""

    facts: tuple[Fact, ...]
    next_after: int | None


@dataclass(frozen=True, kw_only=True)
class ImportReport:
    """Counts from a JSONL import. `facts` and `episodes` count the lines imported, each either
    new or already stored; `errors` holds (line number, message) of skipped lines."""

    facts: int
    episodes: int
    skipped: int
    errors: tuple[tuple[int, str], ...] = ()
    facts_new: int
    """Fact lines written as new facts (`facts = facts_new + facts_merged`)."""
    facts_merged: int
    """Fact lines that resolved to a fact already stored, or to an equal line before them, and
    were merged into it (see README, "Duplicates, single-valued relations and history")."""
    episodes_new: int
    """Episode lines written (`episodes = episodes_new + episodes_present`)."""
    episodes_present: int
    """Episode lines the scope held already (same thread, text and time; any time for a line
    without one), or repeating a line before them: not written again."""
    items: int = 0
    """Item lines imported (`items.transfer`): each item stored, replacing one the scope held at its
    namespace and key; of a key repeated in the file, the last line's."""


@dataclass(frozen=True, kw_only=True)
class Message:
    """One chat message for `remember`: who said it, what, and optionally when and its id (kept as
    the provenance of the facts it yields). Mappings with `role` and `content` (or `text`) are
    accepted wherever a Message is."""

    role: str
    content: str
    timestamp: TimeInput | None = None
    id: str | None = None


USER_ROLES = frozenset({"user", "human"})
"""The roles of the user's own turns (case folded): what the user said is what a conversation is
about, for the conversation signal and for the facts `remember` recalls before it asks its model."""


@dataclass(frozen=True, kw_only=True)
class RejectedOperation:
    """An operation the extractor proposed that failed memsoda's checks, and why."""

    index: int
    """Its 0-based position in the extractor's output."""
    op: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class RememberResult:
    """What `remember` did. `added` holds the ids of facts written (a fact already live resolves to
    its id), `superseded` (old id, new id) pairs, `ended` the ids of facts ended."""

    added: tuple[int, ...] = ()
    superseded: tuple[tuple[int, int], ...] = ()
    ended: tuple[int, ...] = ()
    rejected: tuple[RejectedOperation, ...] = ()
    shown: tuple[int, ...] = ()
    """The ids of the live facts the extractor was shown (the only ones it may change)."""
    episode_id: int | None = None


@dataclass(frozen=True, kw_only=True)
class FactSource:
    """Where a fact came from: a message of a thread, written by `remember` at `created_at`."""

    fact_id: int
    thread_id: str | None
    message_id: str | None
    created_at: datetime
