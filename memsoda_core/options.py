"""Recall options and their defaults. Frozen: derive variants with `dataclasses.replace`."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from memsoda_core.errors import ArgumentTypeError, ConfigurationError, LimitError
from memsoda_core.limits import MAX_K

MAX_OPTION_INT = 2**31 - 1
"""Every option's bound: PostgreSQL's integer."""


@dataclass(frozen=True, kw_only=True)
class RecallOptions:
    """Every knob of a recall. The first five are also keyword arguments of `Memory.recall`."""

    facts_in_context: int = 8
    min_confidence: float = 0.5
    anchor_vector_top_k: int = 3
    """The most entities the query can come near (the anchor signal's near entities)."""
    anchor_vector_min: float | None = None
    """An absolute cosine from which an entity's name embedding is near the query (the `top_k`
    nearest at or above it). None (the default): the scale-free rule of `anchor_vector_gap`, since a
    cosine means something else under each embedder (bench/RESULTS.md, "Quality under several
    embedders")."""
    rrf_k: int = 60

    anchor_vector_gap: float = 0.5
    """With no `anchor_vector_min`, which entities are near the query: among its
    `anchor_vector_pool` nearest (by name embedding), those ranked before a drop in similarity wider
    than this share of the pool's spread (nearest minus farthest), within the `top_k` first. At 0.5
    the drop is wider than all the pool's other steps together: the entities stand apart from the
    rest as a group, which a query naming none of them (a smooth falloff) does not show. Ranks and
    ratios of differences do not move when an embedder's cosines are shifted or scaled."""
    anchor_vector_pool: int = 30
    """How many of the query's nearest entities the gap rule compares (at least `top_k` + 1); a
    scope of fewer than 10 entities has none near by that rule (`recall.signals.anchor.NEAR_MIN_POOL`)."""

    anchor_hops: int = 2
    """1: facts touching the anchors; 2: also facts touching their other (non-hub) entities."""
    hub_min_share: float = 0.2
    """An entity touching at least this share of the scope's facts is a hub ..."""
    hub_min_facts: int = 10
    """... provided it touches at least this many facts. Hubs are never anchors or bridges."""

    common_term_share: float = 0.05
    """A query term in more than this share of the scope's facts ..."""
    common_term_min_facts: int = 1_000
    """... and in more than this many of them is left out of the keyword search: it says little about
    which fact is meant and is slow to rank (bench/RESULTS.md, "Keyword signal")."""
    keyword_min_terms: int | None = None
    """A keyword hit holds min(ceil(n/2), this) of the query's n search lexemes: a small fixed
    number, so a long message still finds the notes that share two of its rarer words, while one
    common word alone places nothing. 64 (the most terms a query has) matches like the half rule that
    was the default before (ranked by IDF, not ts_rank). None (the default): the memory chooses, 2
    or 1 (`GENERAL_OPTIONS`, `FIRST_PERSON_OPTIONS`; see `recall.adaptive`)."""
    bridge_max_facts: int = 50
    """A second-hop bridge touching more facts than this is skipped: a busy entity under the hub share
    fans the second hop out over much of the scope (bench/RESULTS.md, "Anchor signal")."""
    anchor_name_share: float | None = None
    """A one-word named anchor must be linked to at least this share of the facts whose text holds
    its word: a word the extractor once took for a name ("Day", "Step", capitalised inside a
    sentence) is in many more facts' text than are linked to it, a real name ("Kyoto") is linked to
    most of them. Longer names are not tested (`recall.signals.entities.name_like`). 0 turns the
    test off (bench/RESULTS.md, section 6, "Named anchors"). None (the default): the memory chooses,
    0.5 or 0.9 (`recall.adaptive`)."""
    anchor_max_facts: int = 100
    """Facts read per anchor, most recently written first: an anchor under the hub share can still touch
    thousands of facts (bench/RESULTS.md, "Anchor signal"); the other signals reach its older ones."""
    vector_candidates: int = 50
    """Length of the vector signal's list."""
    keyword_candidates: int = 50
    """Length of the keyword signal's list."""
    anchor_candidates: int = 50
    """Length of the anchor signal's list (after ordering by relevance)."""
    recent_candidates: int | None = None
    """With a query: fuse this many most recent live facts as a list of their own (the "recent"
    signal, which is the whole result without a query); 0 (the default) turns it off. For memories
    whose later notes restate and update earlier ones, where the latest notes are what a message
    is about. A list that ignores the query still votes in RRF: where time says nothing about
    relevance it buries what only the vector list finds (bench/RESULTS.md, section 6, "A recency
    list, ..."). None (the default): the memory chooses, 0 or 50 (`recall.adaptive`)."""
    date_candidates: int = 50
    """Length of the date signal's list (facts that held in the window a question names); 0 turns
    the signal off."""
    conversation_turns: int = 2
    """With `recall(conversation=...)`: how many of the latest user turns the conversation signal
    embeds together."""
    conversation_candidates: int = 50
    """Length of the conversation signal's list."""
    relevance_floor: float = -1.0
    """When the query's nearest fact has a cosine similarity below this, the recall finds nothing
    (no facts, context ""). -1 (the default): off, as it must stay: a cosine is on the embedder's
    own scale, so only a caller who knows theirs can set one. Only a recall with a query embedding
    is judged."""
    as_of_from_question: bool = True
    """A question asking what held in a past window ("where did I live in 2019?") reads memory as
    of the window's end, unless the caller gives `as_of` or `known_at` (`recall.asof`)."""
    episodes_k: int = 3
    embed_timeout_s: float = 10.0
    """An embedder slower than this makes the recall degrade instead of waiting."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and "None" in str(f.type):
                continue
            if f.type in ("bool", bool):
                if not isinstance(value, bool):
                    raise ArgumentTypeError(f"{f.name} must be True or False, got {value!r}")
                continue
            wanted = int if f.type in ("int", int) else float  # float and float | None
            if isinstance(value, bool) or not isinstance(value, int if wanted is int else int | float):
                raise ArgumentTypeError(f"{f.name} must be {'an int' if wanted is int else 'a number'}, got {value!r}")
            if wanted is float and value != value:
                raise LimitError(f"{f.name} must be a number, got NaN")
            # an integer goes to PostgreSQL (or becomes a float): it must fit an integer column
            if isinstance(value, int) and abs(value) > MAX_OPTION_INT:
                raise LimitError(f"{f.name} is out of range (an integer beyond ±{MAX_OPTION_INT})")
        if not 1 <= self.facts_in_context <= MAX_K:
            raise LimitError(f"facts_in_context (k) must be between 1 and {MAX_K}, got {self.facts_in_context}")
        if not 0.0 <= self.min_confidence <= 1.0:
            raise LimitError(f"min_confidence must be between 0 and 1, got {self.min_confidence}")
        for name in ("anchor_vector_min", "relevance_floor"):
            if getattr(self, name) is not None and not -1.0 <= getattr(self, name) <= 1.0:
                raise LimitError(f"{name} must be a cosine similarity in -1..1, got {getattr(self, name)}")
        if not 0.0 < self.anchor_vector_gap <= 1.0:
            raise LimitError(f"anchor_vector_gap must be in (0, 1], got {self.anchor_vector_gap}")
        if not 1 <= self.anchor_vector_pool <= 1000:
            raise LimitError(f"anchor_vector_pool must be between 1 and 1000, got {self.anchor_vector_pool}")
        if self.anchor_hops not in (1, 2):
            raise LimitError(f"anchor_hops must be 1 or 2, got {self.anchor_hops}")
        for name in ("hub_min_share", "common_term_share"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise LimitError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        if self.anchor_name_share is not None and not 0.0 <= self.anchor_name_share <= 1.0:
            raise LimitError(f"anchor_name_share must be in [0, 1] (0: off), got {self.anchor_name_share}")
        for name in (
            "anchor_vector_top_k",
            "rrf_k",
            "hub_min_facts",
            "common_term_min_facts",
            "episodes_k",
            "bridge_max_facts",
        ):
            if getattr(self, name) < 0:
                raise LimitError(f"{name} must not be negative")
        if self.keyword_min_terms is not None and not 1 <= self.keyword_min_terms <= 64:
            raise LimitError(f"keyword_min_terms must be between 1 and 64, got {self.keyword_min_terms}")
        for name in (
            "vector_candidates",
            "keyword_candidates",
            "anchor_candidates",
            "anchor_max_facts",
            "conversation_candidates",
        ):
            if not 1 <= getattr(self, name) <= 1000:
                raise LimitError(f"{name} must be between 1 and 1000")
        for name in ("date_candidates", "recent_candidates"):
            if getattr(self, name) is not None and not 0 <= getattr(self, name) <= 1000:
                raise LimitError(f"{name} must be between 0 (off) and 1000")
        if not 1 <= self.conversation_turns <= 20:
            raise LimitError(f"conversation_turns must be between 1 and 20, got {self.conversation_turns}")
        if self.embed_timeout_s <= 0:
            raise LimitError("embed_timeout_s must be positive")

    def with_overrides(self, overrides: dict[str, Any]) -> RecallOptions:
        """A copy with the given fields replaced; unknown names raise ConfigurationError."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigurationError(
                f"unknown recall option(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return replace(self, **overrides) if overrides else self

    def left_to_memory(self) -> tuple[str, ...]:
        """The options at None, which the memory chooses from its statistics (`ADAPTIVE`)."""
        return tuple(name for name in ADAPTIVE if getattr(self, name) is None)

    def filled(self, preset: RecallOptions) -> RecallOptions:
        """A copy with the options left to the memory taken from `preset`; the others stay."""
        left = self.left_to_memory()
        return replace(self, **{name: getattr(preset, name) for name in left}) if left else self


ADAPTIVE = ("recent_candidates", "keyword_min_terms", "anchor_name_share")
"""The options a memory chooses when the caller leaves them at None: the ones whose best value
depends on the kind of memory (`recall.adaptive`)."""


DEFAULT_OPTIONS = RecallOptions()
"""Every option at its default: the `ADAPTIVE` ones left to the memory."""

GENERAL_OPTIONS = RecallOptions(recent_candidates=0, keyword_min_terms=2, anchor_name_share=0.5)
"""For a memory of facts about many named things (chats between named speakers, a knowledge base):
no recency list, two matched terms for a keyword hit, the name test at half the facts. What the
memory chooses unless its statistics show a first-person memory (`recall.adaptive`), and the
defaults before the choice (set, so nothing is left to choose)."""

FIRST_PERSON_OPTIONS = RecallOptions(recent_candidates=50, keyword_min_terms=1, anchor_name_share=0.9)
"""For a memory of one user's own sessions with an assistant (a personal assistant's memory): its
later notes restate and update earlier ones, its questions are the user's long messages, and the
notes name few things but the user. So the 50 most recent live facts are fused as a list of their
own (the latest notes are what a message goes on from); one matched word places a fact in the
keyword list (ranked by IDF: a rare word counts, a common one ranks low); and a capitalised word
anchors only where nearly every note holding it is linked to it. On memories of facts about many
named things the recency list buries what only the vector list finds, so the memory takes these
only when its statistics show a memory of one person's notes (`recall.adaptive`; bench/RESULTS.md,
section 6)."""
