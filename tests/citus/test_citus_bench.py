"""A smoke run of `python -m bench citus` on the session's cluster, at a tiny size (its shape, never
its timings: those are bench/RESULTS.md's, section 7). Here rather than in tests/test_bench_smoke.py,
which has no cluster."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/ is a directory, not a package

from bench.__main__ import main
from bench.citus_direct import FORMS

if TYPE_CHECKING:
    from tools.citus import Cluster  # loaded from its file at run time (tools/ is no package)

pytestmark = pytest.mark.citus


def test_citus_bench_smoke(
    cluster: Cluster, pg_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MEMSODA_DSN", pg_dsn)  # the one node: the session's server
    sizes = ["--small", "60", "--large", "150", "--recalls", "3", "--writes", "2", "--warmup", "1"]
    options = ["--tuned", "--through-coordinator", "--shard-direct"]
    assert main(["citus", *sizes, *options, "--citus-dsn", cluster.dsn]) == 0
    out = capsys.readouterr().out
    assert "Citus defaults (32 shards, distributed: True)" in out and "8 shards, large tenant isolated (" in out
    for tenant in ("60 facts", "150 facts"):
        assert f"| {tenant} | Citus defaults |" in out
        assert f"| {tenant} | 8 shards, large tenant isolated |" in out
        assert f"| {tenant} | Citus defaults, worker_reads=False |" in out
    assert out.count("x |") >= 18  # the three ratios of each tenant and store
    for form in FORMS:  # the small tenant's statement alone, three ways
        assert re.search(rf"^\| {re.escape(form)} \| [\d.]+ / [\d.]+ \| [\d.]+x \|$", out, re.MULTILINE), form
