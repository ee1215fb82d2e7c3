"""`python -m bench learning`: the learning loop (`Memory.remember`) with a zero-latency scripted
extractor, so what is timed and scored is memsoda's own part.

1. Cost: `remember` of a 6-message window yielding 4 facts (recall of the related facts, the
   checks, the write) against `add_facts` of the same 4 facts, side by side in one run.
2. Replay: the RealMem dev personas (`bench.realmem`'s data) replayed session by session through
   `remember`, the extractor answering with the session's own memory points (each quoting its
   source turn), against the same points written with `add_facts`. After every session: live
   duplicates and single-valued relations holding more than one live value (both must be 0);
   recall@8 / MRR@8 at each question with the memory the loop built.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import metrics, realmem
from bench.common import bench_memory, connect, environment, markdown_table, percentiles
from memsoda_core import Memory, ScopeArgs
from memsoda_core.embedders import Embedder
from memsoda_core.learning import ExtractionRequest

_SENTENCE = re.compile(r"[^.!?\n]{8,200}")


def quote_of(text: str) -> str:
    """A verbatim piece of `text` a model would quote: its first sentence (up to 200 chars)."""
    match = _SENTENCE.search(text)
    return (match.group() if match else text[:200]).strip()


class ScriptedExtractor:
    """Answers each request with the operations it is given for it (no model, no latency)."""

    def __init__(self) -> None:
        self.next: list[dict[str, Any]] = []
        self.shown: list[int] = []

    def extract(self, request: ExtractionRequest) -> dict[str, Any]:
        self.shown.append(len(request.facts))
        return {"operations": self.next, "summary": None}

    async def aextract(self, request: ExtractionRequest) -> dict[str, Any]:
        return self.extract(request)


def add_op(record: dict[str, Any], quote: str) -> dict[str, Any]:
    fact = {**record, "valid_at": record["valid_at"].isoformat(), "source_quote": quote}
    return {"op": "add", "fact_id": None, "fact": fact, "ended_at": None, "source_quote": None}


# --- 1. cost ---------------------------------------------------------------------------------------


def _window(call: int) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """A 6-message window and the 4 facts its user turns state."""
    things = [f"item {call}-{i}" for i in range(4)]
    messages = []
    for i in range(3):
        messages.append({"role": "user", "content": f"By the way, I bought {things[i]} and I also like {things[3]}."})
        messages.append({"role": "assistant", "content": "Noted, that sounds great."})
    records = [
        {"subject": "user", "predicate": "bought", "object": things[i], "object_type": "PRODUCT"} for i in range(3)
    ] + [{"subject": "user", "predicate": "likes", "object": things[3], "object_type": "PRODUCT"}]
    quotes = [f"I bought {things[i]}" for i in range(3)] + [f"I also like {things[3]}"]
    ops = [
        {"op": "add", "fact_id": None, "fact": {**r, "source_quote": q}, "ended_at": None, "source_quote": None}
        for r, q in zip(records, quotes, strict=True)
    ]
    return messages, ops


def cost(memory: Memory, *, calls: int, seed: int) -> str:
    scope: ScopeArgs = {"dataset": "bench-learning", "project": f"cost-{time.time_ns()}"}
    memory.add_facts(
        [{"subject": "user", "predicate": f"noted {i % 13}", "object": f"seed fact {i}"} for i in range(seed)], **scope
    )
    extractor = ScriptedExtractor()
    remember_ms: list[float] = []
    add_ms: list[float] = []
    for call in range(calls):
        messages, ops = _window(call)
        extractor.next = ops
        began = time.perf_counter()
        result = memory.remember(messages, **scope, extractor=extractor)
        remember_ms.append((time.perf_counter() - began) * 1000)
        assert len(result.added) == 4 and not result.rejected, result
        _, twin = _window(calls + call)
        began = time.perf_counter()
        memory.add_facts([op["fact"] for op in twin], **scope)
        add_ms.append((time.perf_counter() - began) * 1000)
    memory.forget(**scope)
    warm = slice(min(5, calls // 10), None)
    mine, base = percentiles(remember_ms[warm]), percentiles(add_ms[warm])
    rows = [
        ["remember (window of 6, 4 facts)", mine["p50"], mine["p95"], mine["p50"] / base["p50"]],
        ["add_facts (the same 4 facts)", base["p50"], base["p95"], 1.0],
    ]
    return (
        f"Scope of {seed} facts, {calls} calls each, interleaved; related facts shown: "
        f"{statistics.median(extractor.shown):.0f} (median).\n\n"
        + markdown_table(["call", "p50 ms", "p95 ms", "p50 ratio"], rows)
        + "\n"
    )


# --- 2. replay -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LoopSession:
    at: datetime
    messages: tuple[dict[str, Any], ...]
    questions: tuple[tuple[str, str, frozenset[str]], ...]
    """(category, text, gold contents)"""
    points: tuple[tuple[str, str], ...]
    """(memory point content, the quote of its source turn)"""


def loop_sessions(path: Path) -> Iterator[LoopSession]:
    """The persona's sessions in the order `bench.realmem` replays them, with their turns."""
    import json

    with path.open(encoding="utf-8") as handle:
        dialogues = json.load(handle)["dialogues"]
    ordered = sorted(dialogues, key=lambda s: s["current_time"][:10])
    for position, session in enumerate(ordered):
        at = datetime.strptime(session["current_time"][:10], "%Y-%m-%d").replace(tzinfo=UTC)
        at += timedelta(seconds=position)
        turns = session["dialogue_turns"]
        messages = tuple(
            {
                "role": t["speaker"].lower(),
                "content": t["content"],
                "id": f"{session['session_uuid']}:{i}",
                "timestamp": at.isoformat(),
            }
            for i, t in enumerate(turns)
            if t.get("content", "").strip()
        )
        questions = []
        for index, turn in enumerate(turns):
            if turn.get("is_query"):
                answer: dict[str, Any] = next((t for t in turns[index + 1 :] if t.get("speaker") == "Assistant"), {})
                gold = frozenset(m["content"] for m in answer.get("memory_used") or ())
                if gold:
                    questions.append((str(turn.get("category_name")), turn["content"], gold))
        points = []
        for point in session.get("extracted_memory") or ():
            source = point.get("source_turn")
            text = turns[source]["content"] if isinstance(source, int) and 0 <= source < len(turns) else ""
            points.append((point["content"], quote_of(text) if text.strip() else quote_of(messages[0]["content"])))
        yield LoopSession(at=at, messages=messages, questions=tuple(questions), points=tuple(points))


@dataclass
class LoopScores:
    recall: dict[str, list[float]] = field(default_factory=dict)
    mrr: dict[str, list[float]] = field(default_factory=dict)
    duplicates: int = 0
    multi_valued: int = 0
    rejected: int = 0
    sessions: int = 0
    remember_ms: list[float] = field(default_factory=list)

    def add(self, category: str, ranked: Sequence[str], gold: frozenset[str]) -> None:
        for group in (category, "all"):
            self.recall.setdefault(group, []).append(metrics.recall_at(ranked, gold))
            self.mrr.setdefault(group, []).append(metrics.mrr_at(ranked, gold))


INVARIANTS = """
SELECT (SELECT count(*) FROM (SELECT 1 FROM {s}.facts
         WHERE dataset = %(d)s AND project = %(p)s AND invalid_at IS NULL AND superseded_by IS NULL
         GROUP BY subject, lower(predicate), lower(object) HAVING count(*) > 1) x) AS duplicates,
       (SELECT count(*) FROM (SELECT 1 FROM {s}.facts f JOIN {s}.single_valued sv
            ON sv.dataset = f.dataset AND sv.project = f.project AND sv.predicate = lower(f.predicate)
         WHERE f.dataset = %(d)s AND f.project = %(p)s AND f.invalid_at IS NULL
         GROUP BY f.subject, lower(f.predicate) HAVING count(*) > 1) y) AS multi_valued
"""


def replay(memory: Memory, path: Path, *, max_sessions: int | None) -> tuple[LoopScores, LoopScores]:
    """The persona through `remember` (the loop) and through `add_facts` (direct), same points."""
    from psycopg import sql

    name = path.name.split("_dialogues")[0]
    stamp = time.time_ns()
    loop_scope: ScopeArgs = {"dataset": "bench-learning", "project": f"{name}-loop-{stamp}"}
    direct_scope: ScopeArgs = {"dataset": "bench-learning", "project": f"{name}-direct-{stamp}"}
    extractor = ScriptedExtractor()
    loop, direct = LoopScores(), LoopScores()
    keys: dict[str, dict[int, str]] = {"loop": {}, "direct": {}}
    check = sql.SQL(INVARIANTS).format(s=sql.Identifier(memory.info.schema))
    with connect(memory.dsn) as conn:
        for number, session in enumerate(loop_sessions(path)):
            if max_sessions is not None and number >= max_sessions:
                break
            for category, text, gold in session.questions:
                for label, scope, scores in (("loop", loop_scope, loop), ("direct", direct_scope, direct)):
                    if not keys[label]:
                        scores.add(category, [], gold)
                        continue
                    found = memory.recall(text[:4000], **scope, as_of=session.at)
                    ranked = realmem.ranked_keys([s.fact.id for s in found.facts], keys[label])
                    scores.add(category, ranked, gold)
            if not session.points:
                continue
            records = [realmem.fact_record(content, session.at) for content, _ in session.points]
            extractor.next = [add_op(r, quote) for r, (_, quote) in zip(records, session.points, strict=True)]
            began = time.perf_counter()
            result = memory.remember(list(session.messages), **loop_scope, extractor=extractor, thread_id=name)
            loop.remember_ms.append((time.perf_counter() - began) * 1000)
            loop.rejected += len(result.rejected)
            keys["loop"].update(zip(result.added, (c for c, _ in session.points), strict=False))
            ids = memory.add_facts(records, **direct_scope)
            keys["direct"].update(zip(ids, (c for c, _ in session.points), strict=True))
            row = conn.execute(check, {"d": loop_scope["dataset"], "p": loop_scope["project"]}).fetchone()
            assert row is not None
            loop.duplicates += int(row[0])
            loop.multi_valued += int(row[1])
            loop.sessions += 1
    memory.forget(**loop_scope)
    memory.forget(**direct_scope)
    return loop, direct


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def run(
    *,
    embedder: Embedder,
    calls: int = 200,
    seed: int = 1000,
    personas: int | None = None,
    max_sessions: int | None = None,
) -> str:
    out = ["## The learning loop (`python -m bench learning`)\n", environment(), "\n### Cost of remember\n"]
    with bench_memory(embedder) as memory:
        out.append(cost(memory, calls=calls, seed=seed))
        if not realmem.available():
            out.append("\n(realmem-dev data not found beside the repository: replay skipped)\n")
            return "\n".join(out)
        rows = []
        totals = {"loop": LoopScores(), "direct": LoopScores()}
        for path in realmem.personas()[:personas]:
            loop, direct = replay(memory, path, max_sessions=max_sessions)
            for label, scores in (("loop", loop), ("direct", direct)):
                total = totals[label]
                for group, values in scores.recall.items():
                    total.recall.setdefault(group, []).extend(values)
                for group, values in scores.mrr.items():
                    total.mrr.setdefault(group, []).extend(values)
            totals["loop"].duplicates += loop.duplicates
            totals["loop"].multi_valued += loop.multi_valued
            totals["loop"].rejected += loop.rejected
            totals["loop"].sessions += loop.sessions
            totals["loop"].remember_ms += loop.remember_ms
            rows.append(
                [
                    path.name.split("_dialogues")[0],
                    loop.sessions,
                    len(loop.recall.get("all", [])),
                    _mean(loop.recall.get("all", [])),
                    _mean(direct.recall.get("all", [])),
                    loop.duplicates,
                    loop.multi_valued,
                    loop.rejected,
                ]
            )
        loop_total, direct_total = totals["loop"], totals["direct"]
        rows.append(
            [
                "all",
                loop_total.sessions,
                len(loop_total.recall.get("all", [])),
                _mean(loop_total.recall.get("all", [])),
                _mean(direct_total.recall.get("all", [])),
                loop_total.duplicates,
                loop_total.multi_valued,
                loop_total.rejected,
            ]
        )
        out.append("\n### Replay of the realmem-dev personas through remember\n")
        out.append(
            markdown_table(
                [
                    "persona",
                    "sessions",
                    "questions",
                    "recall@8 loop",
                    "recall@8 add_facts",
                    "live duplicates",
                    "relations with >1 live value",
                    "rejected ops",
                ],
                rows,
            )
        )
        categories: list[tuple[str, float, float, float]] = []
        for group in (*realmem.CATEGORIES, "all"):
            if group in loop_total.recall:
                categories.append(
                    (
                        group,
                        _mean(loop_total.recall[group]),
                        _mean(loop_total.mrr[group]),
                        _mean(direct_total.recall[group]),
                    )
                )
        header = ["category", "recall@8 loop", "MRR@8 loop", "recall@8 add_facts"]
        out.append("\n" + markdown_table(header, categories))
        spent = percentiles(loop_total.remember_ms) if loop_total.remember_ms else {"p50": 0.0, "p95": 0.0}
        out.append(
            f"\nremember per session (whole session as the window): p50 {spent['p50']:.1f} ms, "
            f"p95 {spent['p95']:.1f} ms\n"
        )
    return "\n".join(out)
