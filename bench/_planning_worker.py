"""The worker of `bench.planning`: one tree's recalls, and what its recall statement costs to plan.

`bench.planning` starts it as `python -P <this file> DSN SCHEMA QUERIES PROJECT DIMS RECENT TALK`
with the tree first on PYTHONPATH (and the driving tree after it), so `memsoda_core` and bench's
helpers come from the tree measured. It prints `ready`, then answers each line `I MEASURE` of stdin
(query `I` of the QUERIES file; MEASURE 1 to measure its statement too) with a line of JSON: the
result's digest and fact count and, when measured, the planning times, wall times and text length.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg

from bench.capture import captured_recalls
from bench.common import connect
from bench.hashembed import HashEmbedder
from memsoda_core import Memory, RecallOptions
from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.options import RecentOptions
from memsoda_core.recall.signals import RecallPlan, planned_signals
from memsoda_core.recall.statements import hits_statement, kept_hits_statement, rendered
from memsoda_core.runner.compiled import Compiled
from memsoda_core.validation import Scope

_NOT_COMPARED = frozenset({"timings_ms", "relevance"})
"""`RecallResult.to_dict` keys left out of a result's digest: times differ at every run, and a tree
without the relevance floor has no such key (datetimes compare as ISO text, whatever tzinfo object
each tree's session returns)."""


def parts(schema: str, plan: RecallPlan, scope: Scope) -> dict[str, Compiled]:
    """The recall statement of `plan`, whole (tenant named and tenant bound), and its parts: the
    signals alone, each signal alone, the anchor signal with one hop."""
    named = ScopeAccess(named=scope)
    exact = replace(plan, exact=True)
    out = {
        "whole": kept_hits_statement(schema, plan, named),
        "whole, tenant bound": kept_hits_statement(schema, plan, SHARED),
        "signals alone": rendered(hits_statement(schema, exact, planned_signals(plan), named)),
    }
    for name in planned_signals(plan):
        out[name] = rendered(hits_statement(schema, exact, (name,), named))
    if "anchor" in plan.signals:
        out["anchor, hops=1"] = rendered(hits_statement(schema, replace(exact, hops=1), ("anchor",), named))
    return out


def planning_ms(conn: psycopg.Connection[Any], statement: Compiled, params: dict[str, Any]) -> float:
    """`statement`'s planning time, planned afresh (`EXPLAIN (SUMMARY)` run unnamed)."""
    with psycopg.RawCursor(conn) as cur:
        cur.execute(b"EXPLAIN (SUMMARY, FORMAT JSON) " + statement.query, statement.bind(params), prepare=False)
        row = cur.fetchone()
        assert row is not None
        return float(row[0][0]["Planning Time"])


def wall_ms(conn: psycopg.Connection[Any], statement: Compiled, params: dict[str, Any], prepare: bool) -> float:
    """`statement` run and its rows fetched, unnamed or prepared."""
    with psycopg.RawCursor(conn) as cur:
        start = time.perf_counter()
        cur.execute(statement.query, statement.bind(params), prepare=prepare)
        cur.fetchall()
        return (time.perf_counter() - start) * 1000


def main(argv: list[str]) -> None:
    """Serve `bench.planning`'s queries on stdin until it closes, one JSON line each on stdout."""
    dsn, schema, path, project, dims, recent, talk = argv
    options = RecallOptions(recent=RecentOptions(candidates=int(recent))) if int(recent) else None
    queries = json.loads(Path(path).read_text())
    with (
        captured_recalls() as seen,
        Memory.open(dsn, HashEmbedder(int(dims)), schema=schema) as memory,
        connect(dsn) as conn,
    ):
        print("ready", flush=True)
        for line in sys.stdin:
            i, measure = (int(x) for x in line.split())
            q = queries[i]
            conversation = [{"role": "user", "content": queries[i - 1]["text"]}] if int(talk) and i else None
            result = memory.recall(
                q["text"],
                dataset=q["dataset"],
                project=project,
                query_embedding=q["values"],
                options=options,
                conversation=conversation,
            )
            shown = {key: value for key, value in result.to_dict().items() if key not in _NOT_COMPARED}
            out: dict[str, Any] = {
                "digest": hashlib.sha256(json.dumps(shown, sort_keys=True, default=str).encode()).hexdigest(),
                "facts": len(result.facts),
            }
            if measure:
                plan, params = seen["plan"], seen["params"]
                statements = parts(schema, plan, Scope(dataset=q["dataset"], project=project))
                out["planning"] = {name: planning_ms(conn, s, params) for name, s in statements.items()}
                whole = statements["whole"]
                out["unnamed"] = min(wall_ms(conn, whole, params, False) for _ in range(2))
                out["prepared"] = min(wall_ms(conn, whole, params, True) for _ in range(2))
                out["bytes"] = len(whole.query)
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
