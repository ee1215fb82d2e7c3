"""The soak (bench/soak.py) at a short size: 64 concurrent async recalls, concurrent writers and
forget(entity) loops for a few seconds on the session's PostgreSQL, with zero errors, every
acknowledged write present afterwards and no invariant broken. The full size is
`python -m bench soak --seconds 60`; its figures are a benchmark (bench/RESULTS.md), so nothing
here asserts a latency."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memsoda_core import AsyncMemory, LocalEmbedder

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # bench/ is not an installed package
    sys.path.insert(0, str(ROOT))

from bench.soak import INVARIANTS, SoakConfig, percentile, soak  # noqa: E402


@pytest.fixture
async def async_memory(pg_dsn: str, embedder: LocalEmbedder) -> AsyncIterator[AsyncMemory]:
    memory = await AsyncMemory.open(pg_dsn, embedder)
    try:
        yield memory
    finally:
        await memory.close()


@pytest.mark.slow
async def test_short_soak_loses_nothing_and_has_no_errors(async_memory: AsyncMemory) -> None:
    config = SoakConfig(seconds=4, recallers=64, writers=4, forgetters=2, tenants=3, seed_facts=40)
    report = await soak(async_memory, config)
    assert report.errors == []
    assert report.leaks == 0
    assert (report.missing, report.changed, report.unacknowledged, report.miscounted) == ([], [], [], [])
    assert report.ok
    assert len(report.recall_ms) >= config.recallers  # every loop finished at least one recall
    assert len(report.write_ms) >= config.writers
    assert report.facts_acknowledged > config.tenants * config.seed_facts  # writes landed during the load
    assert report.forgets > 0  # forget(entity) raced the writers
    assert report.violations == dict.fromkeys(INVARIANTS, 0)  # every invariant counted, none broken
    table = report.markdown(where="the test server")
    assert "| recall under load |" in table and "PASS: 0 errors" in table
    assert len(report.baseline_ms) > 0
    # and the soak cleaned up after itself
    assert await async_memory.stats(dataset=report.dataset) == []


def test_percentile_is_nearest_rank() -> None:
    samples = [float(n) for n in range(1, 101)]
    assert (percentile(samples, 50), percentile(samples, 95), percentile(samples, 100)) == (50.0, 95.0, 100.0)
    assert percentile([], 95) == 0.0
    assert percentile([3.0], 50) == 3.0
