"""The learning loop end to end on real conversations: a realmem-dev persona replayed session by
session through `remember` (a scripted extractor answering with the session's memory points, each
quoting its source turn), checked after every session and scored at every question against the
same points written with `add_facts` (`bench.learning`)."""

from __future__ import annotations

import pytest

from bench import learning, realmem
from memsoda_core import LocalEmbedder, Memory

pytestmark = pytest.mark.skipif(not realmem.available(), reason="realmem-dev data is not beside the repository")


def test_a_persona_replayed_through_remember(pg_dsn: str, embedder: LocalEmbedder) -> None:
    with Memory.open(pg_dsn, embedder) as memory:
        loop, direct = learning.replay(memory, realmem.personas()[0], max_sessions=12)
    assert loop.sessions >= 5
    assert (loop.duplicates, loop.multi_valued, loop.rejected) == (0, 0, 0)
    asked = loop.recall.get("all", [])
    assert asked and len(asked) == len(direct.recall["all"])
    assert loop.recall["all"] == direct.recall["all"]  # the loop built the memory add_facts would
    assert sum(asked) > 0
