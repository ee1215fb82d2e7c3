"""The hand-labelled memories under bench/data: facts in memsoda's JSONL import format (the key of
each fact in its `id` field, which import ignores) and queries with their gold fact keys."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
MEMORIES = ("persona", "chat")
KINDS = ("paraphrase", "exact", "bridge", "invalidated")


@dataclass(frozen=True, kw_only=True)
class Query:
    id: str
    kind: str
    text: str
    gold: tuple[str, ...]
    stale: tuple[str, ...] = ()
    hops: int | None = None
    """Bridge queries: 1 when a gold fact touches an entity the query names, 2 when it takes one
    more fact to get there."""

    @property
    def group(self) -> str:
        """The column a query is reported in: its kind, bridges split by hops."""
        return f"bridge-{self.hops}" if self.kind == "bridge" else self.kind


@dataclass(frozen=True, kw_only=True)
class LabelledMemory:
    name: str
    facts: tuple[dict[str, Any], ...]
    """Import records in load order (chronological, as an agent would have written them)."""
    queries: tuple[Query, ...]

    @property
    def keys(self) -> list[str]:
        return [str(fact["id"]) for fact in self.facts]


def _lines(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load(name: str, *, max_queries: int | None = None) -> LabelledMemory:
    """A labelled memory; with `max_queries`, the first few queries of each kind (for smoke runs)."""
    facts = sorted(_lines(DATA / f"{name}.facts.jsonl"), key=lambda f: (f["valid_at"], f["id"]))
    keys = {str(f["id"]) for f in facts}
    queries: list[Query] = []
    seen: dict[str, int] = {}
    for record in _lines(DATA / f"{name}.queries.jsonl"):
        query = Query(
            id=record["id"],
            kind=record["kind"],
            text=record["query"],
            gold=tuple(record["gold"]),
            stale=tuple(record.get("stale", ())),
            hops=record.get("hops"),
        )
        missing = set(query.gold + query.stale) - keys
        if missing:
            raise ValueError(f"{name} query {query.id} names unknown facts {sorted(missing)}")
        seen[query.kind] = seen.get(query.kind, 0) + 1
        if max_queries is None or seen[query.kind] <= max_queries:
            queries.append(query)
    return LabelledMemory(name=name, facts=tuple(facts), queries=tuple(queries))


def import_record(fact: dict[str, Any]) -> dict[str, Any]:
    """The fact as `Memory.add_facts` takes it (the key and kind dropped)."""
    return {k: v for k, v in fact.items() if k not in ("id", "kind")}
