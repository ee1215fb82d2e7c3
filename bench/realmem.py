"""`python -m bench quality --memory realmem`: the RealMem dev personas replayed as the dataset's
README says, scored like the labelled sets (recall@8 / MRR@8 / nDCG@8), per question category.

The data is read at run time from `../shared/data/realmem-dev/` (beside the repository; or
`MEMSODA_REALMEM_DIR`) and never copied: without it the bench says so and skips. Each persona is
one fresh scope. Sessions are replayed in time order (stable on the file's order within a day);
each user turn with `is_query` is asked of what the earlier sessions stored, at the session's
time; after the session its `extracted_memory` points are stored. A memory point becomes the fact
(subject "user", predicate its 【Tag】 lower-cased or "noted", object the note's text as a literal,
mentions the capitalised words inside a sentence, valid at the session's date plus its position
in the replay in seconds); the gold of a question is the `memory_used` contents of the assistant
turn that answers it, and a recalled fact is a hit when its memory point's content is one of them.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from bench import extras, metrics, variants
from bench.common import markdown_table
from bench.embedders import embed_queries
from memsoda_core import LITERAL, Memory
from memsoda_core.options import DEFAULT_OPTIONS, FIRST_PERSON_OPTIONS
from memsoda_core.validation import Scope

DATA = Path(os.environ.get("MEMSODA_REALMEM_DIR") or Path(__file__).resolve().parents[2] / "shared/data/realmem-dev")
DATASET = "bench-realmem"
CATEGORIES = ("Dynamic Incremental", "Dynamic Updating", "Implicit Preference", "Temporal-reasoning")
_TAG = re.compile(r"^\s*【([^】]*)】\s*")
_CAPITALISED = re.compile(r"\b[A-Z][\w'’&-]*(?:\s+[A-Z][\w'’&-]*)*")
_NOT_MENTIONS = frozenset({"user", "i"})
DEFAULT_SIGNALS = ("vector", "anchor", "keyword", "date")
"""The lists `Memory.recall` fuses by default (the date list only when the question names a date)."""
FULL_SIGNALS = (*DEFAULT_SIGNALS, "conversation")
"""... and with `conversation=`."""
PRESET = "first_person"
"""The config of `FIRST_PERSON_OPTIONS`, checked against `Memory.recall` with them (its recency list
is as long as the bench's "recent" list, `vector.candidates`)."""


@dataclass(frozen=True, kw_only=True)
class RealmemRow:
    label: str
    config: str
    signals: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Question:
    persona: str
    id: str
    category: str
    text: str
    gold: frozenset[str]
    stored: int
    """Facts stored when it was asked."""
    reachable: int
    """Gold points stored by then (the rest come from the question's own session)."""


@dataclass(frozen=True, kw_only=True)
class Session:
    at: datetime
    questions: tuple[tuple[str, str, str, frozenset[str], tuple[tuple[str, str], ...]], ...]
    """(query id, category, text, gold contents, the session's turns before it as (role, content))"""
    memories: tuple[str, ...]
    negatives: tuple[str, ...] = ()
    """User turns that need no memory (`is_query` false): the relevance floor's test."""


@dataclass
class Replay:
    questions: list[Question] = field(default_factory=list)
    lists: dict[str, list[dict[str, list[int]]]] = field(default_factory=dict)
    """config -> per question: signal -> fact ids"""
    keys: dict[int, str] = field(default_factory=dict)
    """fact id -> memory point content"""
    recency: dict[int, float] = field(default_factory=dict)
    top: list[float | None] = field(default_factory=list)
    """Per question: the cosine similarity of its nearest live fact (None: empty memory)."""
    negatives: list[float] = field(default_factory=list)
    """Per user turn needing no memory, asked of a non-empty memory: the same similarity."""
    relevance: list[float | None] = field(default_factory=list)
    """Per question: its nearest fact's relevance (`recall.relevance`; None: no calibration yet)."""
    negative_relevance: list[float | None] = field(default_factory=list)
    """Per user turn in `negatives`: the same relevance."""
    agreement: tuple[int, int] = (0, 0)
    full_agreement: tuple[int, int] = (0, 0)
    """`FULL_SIGNALS` fused against `Memory.recall(..., conversation=...)`."""
    preset_agreement: tuple[int, int] = (0, 0)
    """The `PRESET` config + the recency list against `Memory.recall` with `FIRST_PERSON_OPTIONS`."""
    choices: list[str] = field(default_factory=list)
    """Per question: the options the memory chose for its defaults (`recall.adaptive`)."""
    facts: int = 0
    seconds: float = 0.0


def available() -> bool:
    return DATA.is_dir() and any(DATA.glob("*_dialogues_*.json"))


def personas() -> list[Path]:
    return sorted(DATA.glob("*_dialogues_*.json"))


def sessions(path: Path) -> Iterator[Session]:
    """The persona's sessions in time order, each at its date plus its replay position (seconds),
    so that a later session of the same day still comes after an earlier one."""
    with path.open(encoding="utf-8") as handle:
        dialogues = json.load(handle)["dialogues"]
    ordered = sorted(dialogues, key=lambda s: s["current_time"][:10])  # stable: file order within a day
    for position, session in enumerate(ordered):
        day = datetime.strptime(session["current_time"][:10], "%Y-%m-%d").replace(tzinfo=UTC)
        turns = session["dialogue_turns"]
        questions = []
        negatives = []
        for index, turn in enumerate(turns):
            if not turn.get("is_query"):
                if turn.get("speaker") == "User" and turn.get("content", "").strip():
                    negatives.append(turn["content"])
                continue
            answer: dict[str, Any] = next((t for t in turns[index + 1 :] if t.get("speaker") == "Assistant"), {})
            gold = frozenset(m["content"] for m in answer.get("memory_used") or ())
            prior = tuple((str(t.get("speaker", "")).lower(), str(t.get("content", ""))) for t in turns[:index])
            if gold:
                questions.append(
                    (str(turn.get("query_id")), str(turn.get("category_name")), turn["content"], gold, prior)
                )
        yield Session(
            at=day + timedelta(seconds=position),
            questions=tuple(questions),
            memories=tuple(m["content"] for m in session.get("extracted_memory") or ()),
            negatives=tuple(negatives),
        )


def mentions(note: str) -> list[str]:
    """Capitalised words (runs of them) inside a sentence: what a plain proper-noun extractor
    finds, junk included ("I'm", "PM"), so the anchor signal sees what it would in use."""
    found: dict[str, None] = {}
    for match in _CAPITALISED.finditer(note):
        name = match.group().strip()
        before = note[: match.start()].rstrip()
        if not before or before[-1] in ".!?:;\"'(":
            continue  # the first word of a sentence is capitalised whatever it is
        if name.lower() not in _NOT_MENTIONS and len(name) <= 200:
            found.setdefault(name, None)
    return list(found)[:32]


def fact_record(content: str, at: datetime) -> dict[str, Any]:
    """A memory point as `Memory.add_facts` takes it (see the module docstring)."""
    tag = _TAG.match(content)
    note = content[tag.end() :] if tag else content
    predicate = tag.group(1).strip().lower() if tag and tag.group(1).strip() else "noted"
    return {
        "subject": "user",
        "subject_type": "PERSON",
        "predicate": predicate[:500],
        "object": note.strip()[:2000] or content[:2000],
        "object_type": LITERAL,
        "mentions": mentions(note),
        "valid_at": at,
    }


def replay(
    memory: Memory,
    path: Path,
    configs: dict[str, variants.Variant],
    *,
    max_queries: int | None = None,
) -> Replay:
    """Replay one persona; every config's lists for every question, plus the agreement of the
    default config with `Memory.recall`."""
    from bench.common import connect

    name = path.name.split("_dialogues")[0]
    scope = Scope(dataset=DATASET, project=f"{name}-{int(time.time() * 1000)}")
    out = Replay(lists={config: [] for config in configs})
    statements = {config: variants.statement(memory.info.schema, variant) for config, variant in configs.items()}
    tsconfig = memory.info.text_search_config
    started = time.perf_counter()
    agree = asked = full_agree = preset_agree = 0
    stored: set[str] = set()
    with connect(memory.dsn) as conn:
        for session in sessions(path):
            if max_queries is not None and len(out.questions) >= max_queries:
                break
            texts = [q[2] for q in session.questions][
                : None if max_queries is None else max_queries - len(out.questions)
            ]
            vectors = embed_queries(memory.embedder, texts) if texts else []
            said = [extras.windows(q[4], q[2]) for q in session.questions[: len(texts)]]
            flat = [(index, label, text) for index, found in enumerate(said) for label, text in found.items()]
            embedded = embed_queries(memory.embedder, [text for _, _, text in flat]) if flat else []
            windows: list[dict[str, Sequence[float]]] = [{} for _ in said]
            for (index, label, _), window_vector in zip(flat, embedded, strict=True):
                windows[index][label] = window_vector
            calibration = extras.scope_calibration(conn, memory.info.schema, scope)
            for (query_id, category, text, gold, prior), vector, window in zip(
                session.questions, vectors, windows, strict=False
            ):
                out.questions.append(
                    Question(
                        persona=name,
                        id=query_id,
                        category=category,
                        text=text,
                        gold=gold,
                        stored=len(out.keys),
                        reachable=len(gold & stored),
                    )
                )
                options, fusion = variants.resolved(conn, memory.info.schema, scope, DEFAULT_OPTIONS)
                out.choices.append("general" if fusion is None else fusion.preset)
                for config, variant in configs.items():
                    if config == "default":  # what the memory leaves to itself, chosen as Memory.recall does
                        variant = replace(variant, options=options)
                    bound = variants.params(
                        scope=scope,
                        query=text,
                        embedding=vector,
                        at=session.at,
                        options=variant.options,
                        tsconfig=tsconfig,
                    )
                    out.lists[config].append(
                        variants.lists_from_rows(conn.execute(statements[config], bound).fetchall())
                    )
                found, top = extras.lists(
                    conn,
                    memory.info.schema,
                    scope=scope,
                    query=text,
                    embedding=vector,
                    at=session.at,
                    options=DEFAULT_OPTIONS,
                    tsconfig=tsconfig,
                    conversation=window,
                )
                for config in configs:  # the opt-in lists run with the default options, beside every config
                    out.lists[config][-1].update(found)
                    out.lists[config][-1]["recent_among"] = variants.recent_among(out.lists[config][-1], out.recency)
                out.lists["default"][-1] = variants.drop_unchosen(out.lists["default"][-1], options)
                out.top.append(top)
                out.relevance.append(extras.relevance_of(conn, memory.info.schema, scope, vector, top, calibration))
                if out.keys:
                    recalled = memory.recall(
                        text, dataset=scope.dataset, project=scope.project, query_embedding=vector, as_of=session.at
                    )
                    mine = variants.fuse(
                        out.lists["default"][-1],
                        (*DEFAULT_SIGNALS, "recent"),
                        k=DEFAULT_OPTIONS.rrf_k,
                        recency=out.recency,
                        top=metrics.K,
                    )
                    agree += [s.fact.id for s in recalled.facts] == mine
                    asked += 1
                    full = memory.recall(
                        text,
                        dataset=scope.dataset,
                        project=scope.project,
                        query_embedding=vector,
                        as_of=session.at,
                        conversation=[{"role": role, "content": content} for role, content in prior],
                    )
                    fused = variants.fuse(
                        out.lists["default"][-1],
                        (*FULL_SIGNALS, "recent"),
                        k=DEFAULT_OPTIONS.rrf_k,
                        recency=out.recency,
                        top=metrics.K,
                    )
                    full_agree += [s.fact.id for s in full.facts] == fused
                    preset = memory.recall(
                        text,
                        dataset=scope.dataset,
                        project=scope.project,
                        query_embedding=vector,
                        as_of=session.at,
                        options=FIRST_PERSON_OPTIONS,
                    )
                    fused = variants.fuse(
                        out.lists[PRESET][-1],
                        (*DEFAULT_SIGNALS, "recent"),
                        k=DEFAULT_OPTIONS.rrf_k,
                        recency=out.recency,
                        top=metrics.K,
                    )
                    preset_agree += [s.fact.id for s in preset.facts] == fused
            if out.keys and session.negatives and (max_queries is None or len(out.questions) < max_queries):
                plain = variants.params(
                    scope=scope, query="", embedding=[0.0], at=session.at, options=DEFAULT_OPTIONS, tsconfig=tsconfig
                )
                for vector in embed_queries(memory.embedder, list(session.negatives)):
                    params = {**plain, "qvec": np.asarray(vector, dtype=np.float32)}
                    top = extras.top_similarity(conn, memory.info.schema, params)
                    if top is not None:
                        out.negatives.append(top)
                        out.negative_relevance.append(
                            extras.relevance_of(conn, memory.info.schema, scope, vector, top, calibration)
                        )
            if session.memories:
                records = [fact_record(content, session.at) for content in session.memories]
                ids = memory.add_facts(records, dataset=scope.dataset, project=scope.project)
                for fact_id, content in zip(ids, session.memories, strict=True):
                    out.keys[fact_id] = content
                    out.recency[fact_id] = session.at.timestamp()
                stored.update(session.memories)
    out.agreement = (agree, asked)
    out.full_agreement = (full_agree, asked)
    out.preset_agreement = (preset_agree, asked)
    out.facts = len(out.keys)
    out.seconds = time.perf_counter() - started
    return out


def choices(replays: Sequence[Replay]) -> str:
    """How often each persona's memory chose the first-person options, in words."""
    return ", ".join(
        f"{r.questions[0].persona if r.questions else '-'} {r.choices.count('first_person')}/{len(r.choices)}"
        for r in replays
    )


def ranked_keys(ids: Sequence[int], keys: dict[int, str]) -> list[str]:
    """The memory points of the ranked facts; a repeated point (a session restating an earlier
    note word for word) counts once, at its first place."""
    seen: set[str] = set()
    out = []
    for fact_id in ids[: metrics.K]:
        key = keys[fact_id]
        out.append(key if key not in seen else f"repeat:{fact_id}")
        seen.add(key)
    return out


def scores(
    replays: Sequence[Replay], rows: Sequence[RealmemRow], configs: dict[str, variants.Variant]
) -> tuple[dict[str, dict[str, list[float]]], list[dict[str, Any]]]:
    """row label -> metric@category -> per-question values, and the per-question details."""
    table: dict[str, dict[str, list[float]]] = {}
    details: list[dict[str, Any]] = []
    for row in rows:
        per: dict[str, list[float]] = {}
        options = configs[row.config].options
        for result in replays:
            for question, lists in zip(result.questions, result.lists[row.config], strict=True):
                if len(row.signals) == 1:
                    ids = lists.get(row.signals[0], [])
                else:
                    ids = variants.fuse(lists, row.signals, k=options.rrf_k, recency=result.recency, top=metrics.K)
                ranked = ranked_keys(ids, result.keys)
                values = {
                    "recall": metrics.recall_at(ranked, question.gold),
                    "mrr": metrics.mrr_at(ranked, question.gold),
                    "ndcg": metrics.ndcg_at(ranked, question.gold),
                }
                for group in (question.category, "all"):
                    for metric, value in values.items():
                        per.setdefault(f"{metric}@{group}", []).append(value)
                details.append(
                    {
                        "memory": "realmem",
                        "persona": question.persona,
                        "row": row.label,
                        "query": question.id,
                        "kind": question.category,
                        "text": question.text,
                        "gold": sorted(question.gold),
                        "top8": ranked,
                        **values,
                    }
                )
        table[row.label] = per
    return table, details


def tables(replays: Sequence[Replay], table: dict[str, dict[str, list[float]]]) -> str:
    questions = [q for r in replays for q in r.questions]
    counts = {c: sum(q.category == c for q in questions) for c in CATEGORIES}
    counts.update({c: sum(q.category == c for q in questions) for c in {q.category for q in questions}})
    groups = [c for c in CATEGORIES if counts.get(c)] + sorted(set(counts) - set(CATEGORIES) - {"all"})
    groups = [g for g in groups if counts.get(g)] + ["all"]
    counts["all"] = len(questions)
    header = ["variant", *[f"{g} ({counts[g]})" for g in groups]]
    body = []
    for label, per in table.items():
        cells: list[Any] = [label]
        for group in groups:
            r, m, n = (statistics.fmean(per[f"{name}@{group}"]) for name in ("recall", "mrr", "ndcg"))
            cells.append(f"{r:.3f} / {m:.3f} / {n:.3f}")
        body.append(cells)
    return markdown_table(header, body)


def run(
    memory: Memory,
    rows: Sequence[RealmemRow],
    configs: dict[str, variants.Variant],
    *,
    max_queries: int | None = None,
    max_personas: int | None = None,
    details: TextIO | None = None,
    recalls: dict[str, float] | None = None,
) -> str:
    """Every persona (or the first `max_personas`, each cut at `max_queries` questions); markdown.
    `recalls`, when given, receives each row's recall@8 over all questions."""
    if not available():
        return f"### realmem: skipped, no data at {DATA} (the dev personas are read there at run time)\n"
    needed = {row.config for row in rows} | {"default", PRESET}
    chosen = {name: configs[name] for name in configs if name in needed}
    replays = [replay(memory, path, chosen, max_queries=max_queries) for path in personas()[:max_personas]]
    table, records = scores(replays, rows, chosen)
    if recalls is not None:
        recalls.update({label: statistics.fmean(per["recall@all"]) for label, per in table.items() if per})
    questions = [q for r in replays for q in r.questions]
    gold = sum(len(q.gold) for q in questions)
    reachable = sum(q.reachable for q in questions)
    agree = sum(r.agreement[0] for r in replays)
    asked = sum(r.agreement[1] for r in replays)
    full_agree = sum(r.full_agreement[0] for r in replays)
    preset_agree = sum(r.preset_agreement[0] for r in replays)
    negatives = [top for r in replays for top in r.negatives]
    bold = next(row.label for row in rows if row.label.startswith("**"))
    recalled = table[bold]["recall@all"]
    relevant = extras.floor_rows(
        extras.MIN_RELEVANCES,
        [t for r in replays for t in r.relevance],
        recalled,
        [t for r in replays for t in r.negative_relevance],
    )
    cosines = extras.floor_rows(extras.RAW_COSINES, [t for r in replays for t in r.top], recalled, negatives)
    names = ", ".join(
        f"{r.questions[0].persona if r.questions else '-'} ({len(r.questions)} q, {r.facts} facts, {r.seconds:.0f} s)"
        for r in replays
    )
    lines = [
        f"### realmem: {len(replays)} personas, {sum(r.facts for r in replays)} facts, {len(questions)} questions\n",
        f"Personas: {names}. "
        f"Gold points stored before their question: {reachable}/{gold}. Cells: recall@8 / MRR@8 / nDCG@8 "
        f"(mean over the category's questions). Default row identical to `Memory.recall` on {agree}/{asked} "
        "questions asked of a non-empty memory; defaults + conversation identical to "
        f"`Memory.recall(conversation=...)` on {full_agree}/{asked}; first-person options identical to "
        f"`Memory.recall(options=FIRST_PERSON_OPTIONS)` on {preset_agree}/{asked}. "
        f"The memory chose the first-person options for {choices(replays)}.\n",
        tables(replays, table),
        "",
        f"Relevance floor on the default row: {len(negatives)} user turns that need no memory (`is_query` "
        f"false, asked of a non-empty memory) against the {len(questions)} questions.\n",
        markdown_table(extras.floor_header("min_relevance"), relevant),
        "",
        "The same with a floor on the raw cosine of the nearest fact, for contrast (no option takes one: "
        "its trade-off moves with the embedder's scale).\n",
        markdown_table(extras.floor_header("raw cosine"), cosines),
        "",
    ]
    if details is not None:
        for record in records:
            details.write(json.dumps(record) + "\n")
    return "\n".join(lines) + "\n"
