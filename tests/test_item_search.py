"""An item search by query under a filter: the items it selects should be ranked by recall's fused
score even when many items it does not select lie nearer the query."""

from __future__ import annotations

from typing import Any

from memsoda_core import ScopeArgs
from tests.conftest import Either

CROWD = 400
"""Items nearer the query than the filtered ones, outside the filter: more than recall keeps
(`limits.MAX_K`, 200) and than its signals' candidate lists."""


def note(key: str, kind: str, text: str) -> dict[str, Any]:
    return {"namespace": ["notes"], "key": key, "value": {"kind": kind}, "text": text}


async def test_a_filtered_search_ranks_its_items_by_recall_despite_a_nearer_crowd(
    memory: Either, scope: ScopeArgs
) -> None:
    await memory.put_items([note(f"c{n}", "common", f"coffee note {n}: more coffee") for n in range(CROWD)], **scope)
    await memory.put_items([note("beans", "rare", "espresso beans roasted in Ethiopia")], **scope)
    await memory.put_items([note("garden", "rare", "the garden needs watering on Sunday")], **scope)
    found = await memory.search_items(["notes"], query="coffee", filter={"kind": "rare"}, limit=2, **scope)
    assert [i.key for i in found] == ["beans", "garden"]
    assert found[0].score is not None and found[0].score > 0  # a fused score, as without the crowd
