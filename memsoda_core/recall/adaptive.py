"""Which fusion a memory uses for the options its caller left to it (pure).

The first-person options (`FIRST_PERSON_OPTIONS`: a recency list, one matched term for a keyword
hit, a stricter name test) serve a memory of one person's notes: later notes restate and update
earlier ones, and the notes are sentences about the user naming few other things. On a memory of
facts about many named things the recency list buries what only the vector list finds, so there
the general options stay (`GENERAL_OPTIONS`). The scope's statistics (`recall.scope_stats`) tell
the two apart by shape alone: counts and shares of its facts, never a similarity, so no embedder
moves the choice. Options the caller set are never changed: only those left at None are chosen.
"""

from __future__ import annotations

from functools import lru_cache

from memsoda_core.models import FusionChoice, ScopeStats
from memsoda_core.options import FIRST_PERSON_OPTIONS, GENERAL_OPTIONS, RecallOptions

MIN_SAMPLED = 10
"""Under this many facts the general options stay: a share of so few says little, and so small a
scope is mostly within reach of every list anyway."""

NOTE_LEXEMES = 10.0
"""The mean distinct lexemes per fact from which the facts are notes written as sentences: twice a
triple's (a subject, a predicate and an object of a name or two each hold 3 to 6). Facts extracted
as triples sit near 5, a note log's sentences at 15 and more (bench/RESULTS.md, "The fusion a
memory chooses")."""

ONE_SUBJECT_SHARE = 0.5
"""... and from which one subject is the memory's: most of its latest facts are about it (the user,
in a memory of one person's notes)."""


def first_person(stats: ScopeStats) -> bool:
    """The scope's latest facts are one person's notes: enough of them, written as sentences, most
    about one subject."""
    return (
        stats.sampled >= MIN_SAMPLED
        and stats.lexemes_per_fact >= NOTE_LEXEMES
        and stats.subject_share >= ONE_SUBJECT_SHARE
    )


def _reason(stats: ScopeStats, chosen: bool) -> str:
    shape = (
        f"{stats.sampled} latest facts, {stats.lexemes_per_fact:g} lexemes a fact,"
        f" {stats.subject_share:.0%} about one subject"
    )
    if chosen:
        return f"first-person notes ({shape}: sentences, mostly about one subject)"
    if stats.sampled < MIN_SAMPLED:
        return f"too few facts to tell ({stats.sampled} < {MIN_SAMPLED}): the general options"
    if stats.lexemes_per_fact < NOTE_LEXEMES:
        return f"facts about named things ({shape}: triples, not sentences)"
    return f"facts about many subjects ({shape})"


def choose(options: RecallOptions, stats: ScopeStats | None) -> tuple[RecallOptions, FusionChoice | None]:
    """`options` with the ones left to the memory filled in, and the choice (None when the caller
    set them all). `stats` None: not read, for a recall without a query (nothing it fuses depends
    on them), which takes the general values. Memoized: pure, and a memory's recalls ask it for the
    same options and the statistics it remembers of a scope, whose reason is worded once. Equal
    options are the same options to it: it may return an equal object another call passed."""
    return _choose(options, stats)


@lru_cache(maxsize=256)
def _choose(options: RecallOptions, stats: ScopeStats | None) -> tuple[RecallOptions, FusionChoice | None]:
    left = options.left_to_memory()
    if not left:
        return options, None
    if stats is None:
        choice = FusionChoice(preset="general", chosen=left, reason="no query: the latest facts", stats=None)
        return _filled(options, GENERAL_OPTIONS), choice
    chosen = first_person(stats)
    preset = FIRST_PERSON_OPTIONS if chosen else GENERAL_OPTIONS
    choice = FusionChoice(
        preset="first_person" if chosen else "general", chosen=left, reason=_reason(stats, chosen), stats=stats
    )
    return _filled(options, preset), choice


@lru_cache(maxsize=64)
def _filled(options: RecallOptions, preset: RecallOptions) -> RecallOptions:
    """`options.filled(preset)`, memoized: a memory's recalls ask it for the same few pairs, and
    making the options again checks every group."""
    return options.filled(preset)
