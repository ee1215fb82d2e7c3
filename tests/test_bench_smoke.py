"""Smoke runs of every `python -m bench` command at a tiny size, so the benchmarks keep working.

They check the shape of the output (tables, rows, the agreement check), never timings: speed and
quality are measured by the benchmarks themselves (bench/RESULTS.md). The fast hashing embedder
stands in for the model; the store is the session's PostgreSQL, each run in a schema of its own.
"""

from __future__ import annotations

import re
import sys
from datetime import datetime
from pathlib import Path

import pytest

# bench/ is a directory of the repository, not an installed package: make it importable however
# pytest was started (the `pytest` script does not put the repository root on sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.__main__ import main
from bench.labelled import KINDS, MEMORIES, load
from bench.metrics import mrr_at, ndcg_at, recall_at, stale_at
from bench.realmem import available as realmem_available


@pytest.fixture
def bench_dsn(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("MEMSODA_DSN", pg_dsn)
    return pg_dsn


def test_labelled_sets_are_complete() -> None:
    persona = load("persona")
    assert len(persona.facts) >= 300
    assert len(persona.queries) >= 100
    assert {q.kind for q in persona.queries} == set(KINDS)
    assert {q.hops for q in persona.queries if q.kind == "bridge"} == {1, 2}
    assert all(q.stale for q in persona.queries if q.kind == "invalidated")
    entities = {f["subject"] for f in persona.facts} | {
        f["object"] for f in persona.facts if f["object_type"] != "LITERAL"
    }
    assert len(entities) >= 50
    chat = load("chat")
    speakers = {"caroline", "melanie"}
    assert sum(f["subject"] in speakers for f in chat.facts) / len(chat.facts) > 0.8
    assert sum(any(s in q.text.lower() for s in speakers) for q in chat.queries) / len(chat.queries) > 0.8
    assert set(MEMORIES) == {"persona", "chat"}


def test_metrics() -> None:
    ranked = ["a", "b", "c"]
    assert recall_at(ranked, {"b", "z"}) == 0.5
    assert mrr_at(ranked, {"c"}) == pytest.approx(1 / 3)
    assert ndcg_at(ranked, {"a"}) == 1.0
    assert ndcg_at(["x", "a"], {"a"}) < 1.0
    assert stale_at(ranked, {"c"}) == 1.0 and stale_at(ranked, {"q"}) == 0.0


def test_quality_smoke(bench_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quality", "--embedder", "hash", "--max-queries", "1"]) == 0
    out = capsys.readouterr().out
    for name in MEMORIES:
        assert f"### {name}:" in out
    match = re.findall(r"identical to `Memory.recall` on (\d+)/(\d+) queries", out)
    assert len(match) == 2 and all(a == b for a, b in match)
    assert "| variant | paraphrase (1) |" in out
    assert "**full: vector + anchor + keyword + date (defaults)**" in out
    assert "vector + keyword RRF, no validity filter" in out


@pytest.mark.skipif(not realmem_available(), reason="no realmem-dev data beside the repository")
def test_realmem_smoke(bench_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["quality", "--memory", "realmem", "--embedder", "hash", "--max-queries", "6", "--personas", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "### realmem: 1 personas," in out and ", 6 questions" in out
    agree, asked = re.findall(r"identical to `Memory.recall` on (\d+)/(\d+) questions", out)[0]
    assert agree == asked and int(asked) > 0
    assert "| vector + keyword RRF (EnsembleRetriever's fusion) |" in out
    assert "| **full: vector + anchor + keyword + date (defaults)** |" in out
    assert "all (6) |" in out
    full = re.findall(r"identical to `Memory.recall\(conversation=...\)` on (\d+)/(\d+)", out)
    assert full and full[0][0] == full[0][1] == asked
    preset = re.findall(r"identical to `Memory.recall\(options=FIRST_PERSON_OPTIONS\)` on (\d+)/(\d+)", out)
    assert preset and preset[0][0] == preset[0][1] == asked
    assert "| **first-person options (`FIRST_PERSON_OPTIONS`" in out
    assert "| defaults + recency list (recent.candidates=50) |" in out
    assert "| min_relevance |" in out and "| 0.30 |" in out and "| raw cosine |" in out


@pytest.mark.skipif(not realmem_available(), reason="no realmem-dev data beside the repository")
def test_profile_smoke(bench_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["profile", "--embedder", "hash", "--personas", "1", "--max-questions", "6", "--max-facts", "5"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "### profile: 1 personas" in out and "5 turns after the first" in out
    assert re.search(r"\| recall block in the system prompt \| \d/5 \(", out)
    assert "| profile (max 5) in the system prompt, recall after the conversation |" in out
    assert "| recall alone (8) |" in out


def test_realmem_mapping() -> None:
    from bench.realmem import fact_record, mentions

    record = fact_record("【Travel Plan】 User wants to see Kyoto in June. The trip is short.", datetime(2026, 1, 1))
    assert (record["subject"], record["predicate"], record["object_type"]) == ("user", "travel plan", "LITERAL")
    assert record["object"] == "User wants to see Kyoto in June. The trip is short."
    assert mentions(record["object"]) == ["Kyoto", "June"]  # a sentence's first word is no mention
    assert fact_record("User likes tea.", datetime(2026, 1, 1))["predicate"] == "noted"


def test_speed_smoke(bench_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "speed",
        "--embedder",
        "hash",
        "--sizes",
        "400",
        "--small",
        "2",
        "--small-facts",
        "50",
        "--queries",
        "4",
        "--warmup",
        "1",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "### large tenant of 400 facts" in out
    assert "### small tenant of 50 facts" in out  # the first small tenant is measured too
    assert "| memsoda recall |" in out
    assert "| floor: bare kNN top-8 |" in out
    assert "memsoda recall, embedder in the loop" in out
    assert out.count("Back to back: the same queries") == 2  # both tenants, with their own table


def test_ingest_smoke(bench_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["ingest", "--embedder", "hash", "--base", "1000", "--large", "300"]
    args += ["--embedded", "20", "--given", "40", "--batches", "20"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "| bulk: binary COPY, secondary indexes dropped |" in out
    assert "| add_facts, vectors given, into an indexed tenant | 40 | 20 |" in out
    assert "| add_facts, vectors given, into a new tenant | 40 | 20 |" in out
    assert "| add_facts, vectors given, into a small tenant | 40 | 20 |" in out
    for target in ("a new tenant", "an indexed tenant, index kept", "an indexed tenant, index rebuilt"):
        assert f"| import_jsonl, stand-in embedder, into {target} | 40 | 500 |" in out


def test_index_smoke(bench_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index", "--embedder", "hash", "--facts", "300", "--extra", "200", "--queries", "3"]) == 0
    out = capsys.readouterr().out
    assert "## Vector index: writes against search (300 vectors, then 200 written)" in out
    lines = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| index")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    assert len(rows) == 12 and rows[0][0] == "no index: exact scan"
    assert rows[1][0].startswith("HNSW m 16, ef_construction 64 (memsoda)")
    assert rows[0][4:] == ["1.000", "1.000"]  # the exact scan is its own truth, ties included
    assert all(0 <= float(row[4]) <= 1 and 0 <= float(row[5]) <= 1 for row in rows)


def test_stream_is_seeded_and_moves_gold() -> None:
    from bench.stream_build import SINGLE_VALUED, build_stream, rewordings_of

    persona = load("persona")
    first, again = build_stream(persona, seed=3), build_stream(persona, seed=3)
    assert [(e.key, e.kind, e.arrival, e.record) for e in first.events] == [
        (e.key, e.kind, e.arrival, e.record) for e in again.events
    ]
    assert [e.arrival for e in first.events] == sorted(e.arrival for e in first.events)
    changed = {e.record["predicate"] for e in first.events if e.kind == "change"}
    assert changed and changed <= set(SINGLE_VALUED)
    moved = [q for q in first.queries(persona) if first.changed(q)]
    assert all(any(k in first.latest.values() for k in q.gold) for q in moved)
    for query in moved:
        for key in first.latest:
            if first.latest[key] in query.gold:
                assert set(first.versions[key]) <= set(query.stale) and key in first.versions[key]
    assert "denver" not in rewordings_of("denver") and "the denver" in rewordings_of("denver")


def test_stream_smoke(bench_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stream", "--embedder", "hash"]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in out.splitlines()
        if line.startswith(("| with reconciliation |", "| without (every write"))
    }
    steps, violating = rows["with reconciliation"][:2]
    assert int(steps) > 50 and violating == "0"
    assert int(rows["without (every write a new row)"][1]) > 0
    assert int(rows["without (every write a new row)"][-1]) > 0  # rows copied
    assert "| changed |" in out and "### Near duplicates" in out


def test_replicas_smoke(bench_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["replicas", "--clients", "1,2", "--seconds", "0.5", "--tenants", "3", "--facts", "20"]
    assert main(args) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\| (\d) \| (\d+) \| (\d+) \| [\d.]+x \| (\d+) \|$", out, re.MULTILINE)
    capped = "each server capped at 0.5 CPU" in out
    assert capped or "No capped rows: " in out
    assert [r[0] for r in rows] == ["1", "2"] * (2 if capped else 1)
    assert all(int(alone) > 0 and int(both) > 0 and errors == "0" for _, alone, both, errors in rows)


def test_tenants_smoke(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("MEMSODA_DSN", raising=False)  # its stores are fixed schemas: a server of its own
    args = ["tenants", "--tenants", "40", "--steps", "2,3", "--calls", "2", "--seconds", "0.5", "--threads", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    for case in (
        "a new large tenant's move, median of 5, ms",
        "add_facts(1), random large tenant, p50 ms",
        "add_facts(1), random small tenant, p50 ms",
        "recall, random large tenant, p50 ms",
        "recall, one large tenant again, p50 ms",
    ):
        assert re.search(rf"^\| {re.escape(case)} \| [\d.]+ \| [\d.]+ \| [\d.]+x \|$", out, re.MULTILINE), case
    concurrency = re.search(r"(\d+) add_facts and (\d+) recalls, (\d+) errors", out)
    assert concurrency is not None and int(concurrency[1]) > 0 and int(concurrency[2]) > 0
    assert concurrency[3] == "0"


def test_history_smoke(bench_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "--values", "12", "--window", "4"]) == 0
    out = capsys.readouterr().out
    for kind in ("with a start, in time order", "without a start"):
        assert re.search(rf"^\| {kind} \| [\d.]+ \| [\d.]+ \| [\d.]+x \|$", out, re.MULTILINE), kind
    assert "Live values of the relation at the end: 1 (one expected)." in out
