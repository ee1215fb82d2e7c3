"""Deterministic rendering of recalled facts into the prompt block. Pure; no model call.

Format::

    Known facts about the user, most relevant first.


    # FACTS  (format: fact (valid: from – to))
    - user drives honda civic  (valid: 2026-03-01 – present)


    # ENTITIES
    - honda civic (PRODUCT)

A fact with no known start shows `unknown` as its start (`(valid: unknown – present)`): true
for as long as memory knows. Every stored string is collapsed to one line, so no fact can open a
new line or section.
"""

from __future__ import annotations

from collections.abc import Sequence

from memsoda_core.fact_text import day_or_present, fact_text
from memsoda_core.models import Entity, Episode, ScoredFact
from memsoda_core.text import collapse_line

HEADER = "Known facts about the user, most relevant first."
FACTS_FORMAT = "(format: fact (valid: from – to))"
FACTS_HEADING = "# FACTS  " + FACTS_FORMAT
ENTITIES_HEADING = "# ENTITIES"
EPISODES_HEADING = "# EPISODES  (format: summary (thread, date))"
_SECTION_GAP = "\n\n\n"


def group_by_anchor(facts: Sequence[ScoredFact]) -> list[list[ScoredFact]]:
    """Facts grouped by anchor entity; groups ordered by their best fact, facts by fused order."""
    groups: dict[str, list[ScoredFact]] = {}
    for scored in facts:
        groups.setdefault(scored.fact.anchor, []).append(scored)
    return list(groups.values())


def anchor_entities(groups: Sequence[Sequence[ScoredFact]]) -> list[Entity]:
    """One entity per group, in group order."""
    return [Entity(name=group[0].fact.anchor, type=group[0].fact.anchor_type) for group in groups]


def fact_line(scored: ScoredFact) -> str:
    return f"- {fact_text(scored.fact)}"


def episode_line(episode: Episode) -> str:
    thread = collapse_line(episode.thread_id) if episode.thread_id else "no thread"
    return f"- {collapse_line(episode.text)}  ({thread}, {day_or_present(episode.created_at)})"


def render(
    groups: Sequence[Sequence[ScoredFact]],
    entities: Sequence[Entity],
    episodes: Sequence[Episode] = (),
) -> str:
    """The context block, or "" when there is nothing to show."""
    if not groups and not episodes:
        return ""
    sections = [HEADER]
    if groups:
        sections.append("\n".join([FACTS_HEADING, *(fact_line(f) for group in groups for f in group)]))
        sections.append(
            "\n".join(
                [
                    ENTITIES_HEADING,
                    *(f"- {collapse_line(e.name)} ({collapse_line(e.type)})" for e in entities),
                ]
            )
        )
    if episodes:
        sections.append("\n".join([EPISODES_HEADING, *(episode_line(e) for e in episodes)]))
    return _SECTION_GAP.join(sections)
