"""The opt-in lists of a recall, run with memsoda's own statements for the quality variants: the
recency list (`recent.candidates`), the date signal (a window the question names), the
conversation signal (the session's recent user turns, as its own list), a bench-only design that
blends the conversation into the query vector, and the query's nearest-fact similarity and the scope's
levels that `min_relevance` reads (`recall.relevance`).

Every statement is `memsoda_core.recall.statements.hits_statement` over one signal, with the
parameters of `memsoda_core.recall.result.statement_params`, so a row here is what `Memory.recall`
runs with the same options.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

import numpy as np
import psycopg

from memsoda_core.options import RecallOptions
from memsoda_core.recall.dates import question_window
from memsoda_core.recall.hits import HitRow, hit_rows
from memsoda_core.recall.relevance import (
    Calibration,
    calibrate,
    latest_vectors_statement,
    typical_statement,
)
from memsoda_core.recall.result import statement_params
from memsoda_core.recall.scope_stats import SAMPLE_FACTS
from memsoda_core.recall.signals import RecallPlan, RecallRequest
from memsoda_core.recall.signals.conversation import conversation_text
from memsoda_core.recall.statements import hits_statement, rendered
from memsoda_core.runner.compiled import Compiled
from memsoda_core.validation import Scope

WINDOWS = {"conversation": 2, "conversation4": 4}
"""List name -> how many of the latest user turns it embeds (the core's list is `conversation`,
`conversation.turns`)."""


@lru_cache(maxsize=16)
def _statement(schema: str, signal: str) -> Compiled:
    plan = RecallPlan(query=True, embedding=True)  # the shape flags; the signal is named
    return rendered(hits_statement(schema, plan, (signal,)))


def _rows(conn: psycopg.Connection[Any], schema: str, signal: str, params: dict[str, Any]) -> list[HitRow]:
    statement = _statement(schema, signal)  # compiled to $n text: run raw, as the runner does
    with psycopg.RawCursor(conn, row_factory=hit_rows) as cursor:
        return cursor.execute(statement.query, statement.bind(params)).fetchall()


def windows(prior: Sequence[tuple[str, str]], query: str) -> dict[str, str]:
    """List name -> the text its conversation list embeds (none when no user turn came before)."""
    texts = {name: conversation_text(prior, query, turns) for name, turns in WINDOWS.items()}
    return {name: text for name, text in texts.items() if text is not None}


def blend(query: Sequence[float], window: Sequence[float]) -> np.ndarray[Any, Any]:
    """The bench-only design: one vector, the query's and the conversation's unit vectors summed."""
    q, w = np.asarray(query, dtype=np.float64), np.asarray(window, dtype=np.float64)
    both = q / (np.linalg.norm(q) or 1.0) + w / (np.linalg.norm(w) or 1.0)
    return (both / (np.linalg.norm(both) or 1.0)).astype(np.float32)


def lists(
    conn: psycopg.Connection[Any],
    schema: str,
    *,
    scope: Scope,
    query: str,
    embedding: Sequence[float],
    at: datetime,
    options: RecallOptions,
    tsconfig: str,
    conversation: dict[str, Sequence[float]],
) -> tuple[dict[str, list[int]], float | None]:
    """(signal -> fact ids) of the opt-in lists, and the query's nearest-fact similarity (None in
    an empty memory). `conversation`: list name (`WINDOWS`) -> its window's embedding. The recency
    list is `recent.candidates` long (`vector.candidates` when that is 0, as in the defaults)."""
    window = question_window(query, at) if options.date.candidates else None
    params = statement_params(
        RecallRequest(
            scope=scope,
            query=query,
            embedding=embedding,
            at=at,
            options=options,
            text_search_config=tsconfig,
        )
    )
    out: dict[str, list[int]] = {"recent": [row.fact_id for row in _rows(conn, schema, "recent", params)]}
    if window is not None:
        out["date"] = [row.fact_id for row in _rows(conn, schema, "date", params)]
    for name, vector in conversation.items():
        bound = {**params, "conversation_qvec": np.asarray(vector, dtype=np.float32)}
        out[name] = [row.fact_id for row in _rows(conn, schema, "conversation", bound)]
        if name == "conversation":
            bound["conversation_qvec"] = blend(embedding, vector)
            out["blend"] = [row.fact_id for row in _rows(conn, schema, "conversation", bound)]
    return out, top_similarity(conn, schema, params)


def top_similarity(conn: psycopg.Connection[Any], schema: str, params: dict[str, Any]) -> float | None:
    """The cosine similarity of the live fact nearest the query (what `min_relevance` places)."""
    similarities = [row.similarity for row in _rows(conn, schema, "vector", params) if row.similarity is not None]
    return max(similarities) if similarities else None


def scope_calibration(conn: psycopg.Connection[Any], schema: str, scope: Scope) -> Calibration | None:
    """The scope's relevance levels, read as a recall with `min_relevance` reads them."""
    rows = conn.execute(
        latest_vectors_statement(schema),
        {"dataset": scope.dataset, "project": scope.project, "sample_facts": SAMPLE_FACTS},
    ).fetchall()
    return calibrate([row[0] for row in rows], "bench")


def relevance_of(
    conn: psycopg.Connection[Any],
    schema: str,
    scope: Scope,
    embedding: Sequence[float],
    nearest: float | None,
    calibration: Calibration | None,
) -> float | None:
    """The query's relevance as `Memory.recall` measures it (`recall.relevance.query_relevance`),
    with the scope's levels read once per session; None when nothing is judged."""
    if nearest is None or calibration is None:
        return None
    row = conn.execute(
        typical_statement(schema),
        {
            "dataset": scope.dataset,
            "project": scope.project,
            "sample_facts": SAMPLE_FACTS,
            "qvec": np.asarray(embedding, dtype=np.float32),
        },
    ).fetchone()
    return None if row is None or row[0] is None else calibration.relevance(nearest, row[0])


MIN_RELEVANCES = (0.2, 0.25, 0.3, 0.35, 0.4, 0.5)
"""The floors the bench reports for `RecallOptions.min_relevance`."""

RAW_COSINES = (0.2, 0.3, 0.4, 0.5)
"""Raw cosine floors, for contrast only (no option takes one): their trade-off moves with the
embedder's scale, where `min_relevance`'s should not."""


def floor_rows(
    floors: Sequence[float],
    questions: Sequence[float | None],
    recalls: Sequence[float],
    negatives: Sequence[float | None],
) -> list[list[str]]:
    """Per floor on a per-query value (relevance, or a raw cosine; None: not judged): the share of
    user turns needing no memory that get an empty context, the share of questions that do, and
    recall@8 over the questions with the floor and what it lost."""
    base = sum(recalls) / len(recalls) if recalls else 0.0
    body = [["off", "0.000", "0.000", f"{base:.3f}", "0.000"]]
    for floor in floors:
        empty = [value is not None and value < floor for value in questions]
        kept = [0.0 if gone else value for gone, value in zip(empty, recalls, strict=True)]
        recall = sum(kept) / len(kept) if kept else 0.0
        silent = sum(value is not None and value < floor for value in negatives) / len(negatives) if negatives else 0.0
        share = sum(empty) / len(empty) if empty else 0.0
        body.append([f"{floor:.2f}", f"{silent:.3f}", f"{share:.3f}", f"{recall:.3f}", f"{base - recall:.3f}"])
    return body


def floor_header(floor: str) -> list[str]:
    """The columns of `floor_rows`, the first named after the floor."""
    return [
        floor,
        "turns needing no memory: empty context",
        "questions: empty context",
        "recall@8 (all questions)",
        "recall@8 lost",
    ]
