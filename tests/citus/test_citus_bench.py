"""A smoke run of `python -m bench citus` on the session's cluster, at a tiny size (its shape, never
its timings: those are bench/RESULTS.md's, section 7). Here rather than in tests/test_bench_smoke.py,
which has no cluster."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/ is a directory, not a package

from bench.__main__ import main

pytestmark = pytest.mark.citus


def test_citus_bench_smoke(cluster: Any, pg_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setenv("MEMSODA_DSN", pg_dsn)  # the one node: the session's server
    args = ["citus", "--small", "60", "--large", "150", "--recalls", "3", "--writes", "2", "--warmup", "1"]
    assert main([*args, "--citus-dsn", cluster.dsn]) == 0
    out = capsys.readouterr().out
    assert "distributed: True" in out
    assert "| 60 facts |" in out and "| 150 facts (isolated shard) |" in out
    assert out.count("x |") >= 4  # the two ratios of each tenant
