"""`python -m bench stream`: a replayed stream of changes built from the labelled persona, written
with reconciliation and as memsoda wrote before it, side by side in one store.

The stream and its gold: `bench.stream_build`.

With reconciliation: one scope, `set_single_valued(SINGLE_VALUED)`, every step through
`add_facts`; after each step the invariants (live duplicates: live facts equal case folded;
relations of `SINGLE_VALUED` holding more than one live value) are counted with SQL.

Without reconciliation (memsoda before issue 17: every write a new row, nothing ended), emulated
in a second scope of the same store: the same steps through `add_facts` with no single-valued
registration, so new values accumulate live as they did; a write the store now resolves to an
existing fact (add_facts returns an id it returned before: an equal fact, verbatim or case
folded) is then stored as old memsoda stored it, a new row: an SQL copy of the resolved row under
a new id with the event's object text, start, end, confidence and quote, its `fact_entities`
links copied and the entity and scope fact counts bumped. The vectors of the copies are the
resolved row's (the event's text differs at most in case, and the model is uncased). At the end
`times_seen` is reset to 1, the scope's lexeme counts recounted and `Memory.maintain()` run.

Both scopes are asked the persona's queries after the last step with `Memory.recall` (defaults,
now): recall@8 / MRR@8, stale facts in the top 8, slots of the top 8 taken by a copy.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from bench import metrics, near_duplicates, realmem
from bench.common import bench_memory, connect, environment, markdown_table
from bench.labelled import Query, load
from bench.stream_build import SINGLE_VALUED, STEP, Event, Stream, build_stream, day
from memsoda_core import Memory
from memsoda_core.embedders import Embedder
from memsoda_core.store.lexemes import recount_lexemes

DATASET = "bench-stream"

CHECK = """
SELECT (SELECT count(*) FROM (SELECT 1 FROM {s}.facts
         WHERE dataset = %(d)s AND project = %(p)s AND invalid_at IS NULL AND superseded_by IS NULL
         GROUP BY subject, lower(predicate), lower(object) HAVING count(*) > 1) x) AS duplicates,
       (SELECT count(*) FROM (SELECT 1 FROM {s}.facts
         WHERE dataset = %(d)s AND project = %(p)s AND invalid_at IS NULL AND superseded_by IS NULL
           AND lower(predicate) = ANY(%(singles)s)
         GROUP BY subject, lower(predicate) HAVING count(*) > 1) y) AS multi_valued,
       (SELECT count(*) FROM {s}.facts
         WHERE dataset = %(d)s AND project = %(p)s AND invalid_at IS NULL AND superseded_by IS NULL) AS live
"""


@dataclass
class Written:
    keys: dict[int, str] = field(default_factory=dict)
    """fact id -> label key"""
    steps: int = 0
    duplicates: int = 0
    """live duplicate groups, summed over the steps"""
    multi_valued: int = 0
    """single-valued relations with more than one live value, summed over the steps"""
    violating_steps: int = 0
    final: tuple[int, int, int] = (0, 0, 0)
    """(duplicates, multi_valued, live facts) after the last step"""
    copies: int = 0


def _copy_statement(conn: Any, schema: str) -> sql.Composed:
    """INSERT ... SELECT of a stored fact under a new id, with the event's values (see the module
    docstring); every other column copied."""
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = 'facts' "
        "AND is_generated = 'NEVER' AND column_name <> 'id' ORDER BY ordinal_position",
        (schema,),
    ).fetchall()
    given = {
        "object": sql.SQL("%(object)s"),
        "valid_at": sql.SQL("%(valid_at)s"),
        "invalid_at": sql.SQL("%(invalid_at)s"),
        "confidence": sql.SQL("%(confidence)s"),
        "source_quote": sql.SQL("%(quote)s"),
        "created_at": sql.SQL("now()"),
        "times_seen": sql.SQL("1"),
        "superseded_by": sql.SQL("NULL"),
        "expired_at": sql.SQL("NULL"),
    }
    columns = [r[0] for r in rows]
    chosen = [given.get(c, sql.Identifier(c)) for c in columns]
    return sql.SQL(
        "INSERT INTO {s}.facts ({cols}) SELECT {vals} FROM {s}.facts "
        "WHERE dataset = %(d)s AND project = %(p)s AND id = %(id)s RETURNING id"
    ).format(
        s=sql.Identifier(schema), cols=sql.SQL(", ").join(map(sql.Identifier, columns)), vals=sql.SQL(", ").join(chosen)
    )


def _store_as_before(
    conn: Any, schema: str, copy: sql.Composed, scope: dict[str, str], fact_id: int, event: Event
) -> int:
    """The event as a new row, as memsoda stored every write before reconciliation."""
    s = sql.Identifier(schema)
    record = event.record
    bound = {
        "d": scope["dataset"],
        "p": scope["project"],
        "id": fact_id,
        "object": record["object"],
        "valid_at": day(record["valid_at"]),
        "invalid_at": day(record["invalid_at"]) if record.get("invalid_at") else None,
        "confidence": record.get("confidence", 1.0),
        "quote": record.get("source_quote"),
    }
    with conn.transaction():
        row = conn.execute(copy, bound).fetchone()
        new_id = int(row[0])
        conn.execute(
            sql.SQL(
                "INSERT INTO {s}.fact_entities (dataset, project, entity_id, fact_id, roles) "
                "SELECT dataset, project, entity_id, %(new)s, roles FROM {s}.fact_entities "
                "WHERE dataset = %(d)s AND project = %(p)s AND fact_id = %(id)s"
            ).format(s=s),
            {**bound, "new": new_id},
        )
        conn.execute(
            sql.SQL(
                "UPDATE {s}.entities e SET fact_count = e.fact_count + 1 FROM {s}.fact_entities fe "
                "WHERE fe.dataset = %(d)s AND fe.project = %(p)s AND fe.fact_id = %(new)s "
                "AND e.dataset = fe.dataset AND e.project = fe.project AND e.id = fe.entity_id"
            ).format(s=s),
            {**bound, "new": new_id},
        )
        conn.execute(
            sql.SQL(
                "UPDATE {s}.scopes SET fact_count = fact_count + 1 WHERE dataset = %(d)s AND project = %(p)s"
            ).format(s=s),
            bound,
        )
    return new_id


def write(memory: Memory, stream: Stream, scope: dict[str, str], *, reconcile: bool, step: int = STEP) -> Written:
    """The stream into `scope`, `step` events per `add_facts`, checked after every step."""
    schema = memory.info.schema
    written = Written()
    if reconcile:
        memory.set_single_valued(list(SINGLE_VALUED), dataset=scope["dataset"], project=scope["project"])
    check = sql.SQL(CHECK).format(s=sql.Identifier(schema))
    with connect(memory.dsn) as conn:
        copy = _copy_statement(conn, schema)
        for start in range(0, len(stream.events), step):
            batch = stream.events[start : start + step]
            ids = memory.add_facts([e.record for e in batch], dataset=scope["dataset"], project=scope["project"])
            for fact_id, event in zip(ids, batch, strict=True):
                if not reconcile and fact_id in written.keys:
                    fact_id = _store_as_before(conn, schema, copy, scope, fact_id, event)
                    written.copies += 1
                written.keys.setdefault(fact_id, event.key)
            row = conn.execute(
                check, {"d": scope["dataset"], "p": scope["project"], "singles": list(SINGLE_VALUED)}
            ).fetchone()
            assert row is not None
            written.steps += 1
            written.duplicates += int(row[0])
            written.multi_valued += int(row[1])
            written.violating_steps += int(row[0] > 0 or row[1] > 0)
            written.final = (int(row[0]), int(row[1]), int(row[2]))
        if not reconcile:
            tenant = {"dataset": scope["dataset"], "project": scope["project"]}
            conn.execute(
                sql.SQL(
                    "UPDATE {s}.facts SET times_seen = 1 WHERE dataset = %(dataset)s AND project = %(project)s"
                ).format(s=sql.Identifier(schema)),
                tenant,
            )
            conn.execute(recount_lexemes(schema, scoped=True), tenant)
    if not reconcile:
        memory.maintain()
    return written


@dataclass
class Scores:
    recall: dict[str, list[float]] = field(default_factory=dict)
    mrr: dict[str, list[float]] = field(default_factory=dict)
    stale: dict[str, list[float]] = field(default_factory=dict)
    copies: dict[str, list[float]] = field(default_factory=dict)
    """slots of the top 8 taken by a repeated key"""

    def add(self, groups: Sequence[str], ranked: Sequence[str], query: Query) -> None:
        for group in groups:
            self.recall.setdefault(group, []).append(metrics.recall_at(ranked, query.gold))
            self.mrr.setdefault(group, []).append(metrics.mrr_at(ranked, query.gold))
            self.stale.setdefault(group, []).append(metrics.stale_at(ranked, query.stale))
            self.copies.setdefault(group, []).append(float(sum(k.startswith("repeat:") for k in ranked)))


def score(memory: Memory, stream: Stream, queries: Sequence[Query], scope: dict[str, str], written: Written) -> Scores:
    scores = Scores()
    for query in queries:
        found = memory.recall(query.text, dataset=scope["dataset"], project=scope["project"])
        ranked = realmem.ranked_keys([s.fact.id for s in found.facts], written.keys)
        groups = ["all", query.kind]
        if stream.changed(query):
            groups.append("changed")
        scores.add(groups, ranked, query)
    return scores


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


GROUPS = ("all", "changed", "paraphrase", "exact", "bridge", "invalidated")


def run(*, embedder: Embedder, seed: int = 17, step: int = STEP) -> str:
    labelled = load("persona")
    stream = build_stream(labelled, seed=seed)
    queries = stream.queries(labelled)
    kinds: dict[str, int] = {}
    for event in stream.events:
        kinds[event.kind] = kinds.get(event.kind, 0) + 1
    stamp = time.time_ns()
    scopes = {
        "with": {"dataset": DATASET, "project": f"with-{stamp}"},
        "without": {"dataset": DATASET, "project": f"without-{stamp}"},
    }
    out = ["## A replayed stream of changes (`python -m bench stream`)\n", environment(), ""]
    changed_relations = len(stream.latest)
    out.append(
        f"Stream (seed {seed}): {len(stream.events)} events in {-(-len(stream.events) // step)} steps of {step}: "
        + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        + f"; {changed_relations} single-valued relations changed "
        f"({sum(len(v) for v in stream.versions.values())} values replaced); "
        f"{sum(stream.changed(q) for q in queries)} queries whose gold moved to a latest value.\n"
    )
    with bench_memory(embedder) as memory:
        began = time.perf_counter()
        written = {
            label: write(memory, stream, scope, reconcile=label == "with", step=step) for label, scope in scopes.items()
        }
        spent = time.perf_counter() - began
        scores = {label: score(memory, stream, queries, scopes[label], written[label]) for label in scopes}
        for scope in scopes.values():
            memory.forget(dataset=scope["dataset"], project=scope["project"])
        similarities = near_duplicates.measure(memory.embedder, stream)
    rows = []
    for label, name in (("with", "with reconciliation"), ("without", "without (every write a new row)")):
        w = written[label]
        rows.append(
            [
                name,
                w.steps,
                w.violating_steps,
                w.duplicates,
                w.multi_valued,
                w.final[0],
                w.final[1],
                w.final[2],
                w.copies,
            ]
        )
    out.append(f"### Invariants after every step (both scopes written in {spent:.0f} s)\n")
    out.append(
        markdown_table(
            [
                "scope",
                "steps",
                "steps violating",
                "duplicate groups (sum over steps)",
                ">1 live value (sum over steps)",
                "duplicate groups at the end",
                ">1 live value at the end",
                "live facts at the end",
                "rows copied (writes old memsoda stored anew)",
            ],
            rows,
        )
    )
    out.append("\n### The persona's queries at the end of the stream (`Memory.recall`, defaults)\n")
    header = ["group", "queries", "recall@8 with", "recall@8 without", "MRR@8 with", "MRR@8 without"]
    header += ["stale in top 8 with", "stale in top 8 without", "copies in top 8 with", "copies in top 8 without"]
    table = []
    for group in GROUPS:
        if group not in scores["with"].recall:
            continue
        a, b = scores["with"], scores["without"]
        table.append(
            [
                group,
                len(a.recall[group]),
                _mean(a.recall[group]),
                _mean(b.recall[group]),
                _mean(a.mrr[group]),
                _mean(b.mrr[group]),
                _mean(a.stale[group]),
                _mean(b.stale[group]),
                _mean(a.copies[group]),
                _mean(b.copies[group]),
            ]
        )
    out.append(markdown_table(header, table))
    out.append(
        "\nstale in top 8: share of queries with an earlier value of a relation (or a fact the persona "
        "marks stale) in the top 8; copies: mean top-8 slots taken by a repeat of a fact already ranked.\n"
    )
    out.append(similarities)
    return "\n".join(out) + "\n"
