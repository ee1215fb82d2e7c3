"""What a write added to its scope, as the write reports it (`runner.steps.Wrote`): the memory
updates what it remembers of the scope from it instead of reading the scope again at the next
recall (`MemoryContext.growing`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LatestFact:
    """One of a scope's most recently written facts, as its statistics count it
    (`recall.scope_stats`)."""

    id: int
    subject_id: int
    lexemes: int
    """Its count of distinct search lexemes (`length(tsv)`)."""
    times_seen: int


@dataclass(frozen=True, kw_only=True)
class Growth:
    """What one write did to its scope: it inserted `added` (ids ascending) and wrote stored facts
    again (`restated`); the scope then held `facts` facts (None: it inserted none, the count did
    not change). It may also have ended stored facts, which changes none of these."""

    facts: int | None
    added: tuple[LatestFact, ...] = ()
    restated: tuple[tuple[int, int], ...] = ()
    """(fact id, how many more times it was seen)."""
