"""What a write adds to the scope's counts (entities' fact counts and types, lexemes, the scope's
fact count), and the statements that add it, last in the write and in a fixed order (operations)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from memsoda_core.errors import StoreError
from memsoda_core.runner.steps import Operation, execute
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import Scope, ValidFact
from memsoda_core.writing import inserts
from memsoda_core.writing import statements as sql_write
from memsoda_core.writing.insert_rows import insert_rows

UNTYPED = "OTHER"
"""The type of an entity no fact has given a specific one."""


def keep_specific_type(types: dict[str, str], name: str, kind: str) -> None:
    """Record `kind` as `name`'s type unless it has a specific one already: a specific type wins
    over OTHER, and the first one seen is kept (`inserts.BUMP_ENTITIES` keeps the stored one so)."""
    if types.get(name, UNTYPED) == UNTYPED:
        types[name] = kind


class EntityRows(NamedTuple):
    """The distinct entities of a batch's facts, sorted by name (so concurrent writers lock rows in
    one order), with their types (`keep_specific_type`) and how many of the facts touch each."""

    names: list[str]
    types: list[str]
    touches: list[int]


def entity_rows(facts: Sequence[ValidFact]) -> EntityRows:
    """The `EntityRows` of `facts`."""
    types: dict[str, str] = {}
    touches: dict[str, int] = {}
    for fact in facts:
        typed = {fact.subject: fact.subject_type}
        if fact.object_is_entity:
            typed[fact.object] = fact.object_type
        for name in fact.entity_roles():
            keep_specific_type(types, name, typed.get(name, UNTYPED))
            touches[name] = touches.get(name, 0) + 1
    names = sorted(types)
    return EntityRows(names, [types[n] for n in names], [touches[n] for n in names])


@dataclass
class CountDeltas:
    """What written facts add to the scope's counts: per entity name its type (`keep_specific_type`)
    and the facts touching it, per lexeme the facts holding it, and the facts. Bumped at the end of
    the write's transaction (`bump_counts`), so other writers into the scope wait for these rows
    only from there to the commit."""

    types: dict[str, str] = field(default_factory=dict)
    touches: Counter[str] = field(default_factory=Counter)
    lexemes: Counter[str] = field(default_factory=Counter)
    facts: int = 0

    def add(self, other: CountDeltas) -> None:
        """Add a later batch's deltas (an earlier batch's specific type is kept)."""
        for name, kind in other.types.items():
            keep_specific_type(self.types, name, kind)
        self.touches.update(other.touches)
        self.lexemes.update(other.lexemes)
        self.facts += other.facts


def bump_counts(info: StoreInfo, scope: Scope, deltas: CountDeltas) -> Operation[int | None]:
    """Add `deltas` to the scope's counts, each set of rows in a fixed order (entities by name,
    lexemes, then the scope), so two writers wait for each other instead of deadlocking. Returns
    the scope's fact count after it (None: `deltas` add no fact, nothing is bumped)."""
    if not deltas.facts:
        return None
    base = {"dataset": scope.dataset, "project": scope.project}
    names = sorted(deltas.types)
    bumped = yield from insert_rows(
        info,
        inserts.BUMP_ENTITIES,
        {
            **base,
            "names": names,
            "types": [deltas.types[name] for name in names],
            "touches": [deltas.touches[name] for name in names],
            "filler": np.zeros(info.dimensions, dtype=np.float32),
        },
    )
    if any(created for (created,) in bumped):  # `inserts.BUMP_ENTITIES`' check
        raise StoreError("an entity of this write was deleted before its count was added; try the write again")
    if deltas.lexemes:
        lexemes = sorted(deltas.lexemes)
        yield from insert_rows(
            info,
            inserts.LEXEMES,
            {**base, "lexemes": lexemes, "counts": [deltas.lexemes[lexeme] for lexeme in lexemes]},
        )
    ((facts,),) = yield from execute(sql_write.bump_scope(info.schema), {**base, "delta": deltas.facts})
    return int(facts)
