"""The scope's live facts, read once for the signals of a scope searched exactly.

A scope under the tenant-index threshold has no vector or text index of its own: the vector signal
ranks every live fact by distance, the keyword signal tests every live fact's `tsv`, and the anchor
signal looks each fact it reaches up again. In the one statement such a scope runs
(`statements.kept_hits_statement`, `RecallPlan.exact`) they all read `live` instead: one scan of the
scope, each fact's distance to the query computed once. Its predicate is the one each of them
carried (`fragments.where`), so their lists are those of their own reads (bench/RESULTS.md,
"One scan of a small scope").
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql

from memsoda_core.layouts.access import ScopeAccess
from memsoda_core.recall.fragments import fragment, where
from memsoda_core.recall.signals.spec import RecallPlan, SharedCtes


def reads_live(plan: RecallPlan) -> bool:
    """The signals of `plan` read the `live` CTE rather than the facts table."""
    return plan.exact


def once(exact: bool) -> sql.SQL:
    """What follows `AS` in a signal's CTE: ` MATERIALIZED` in a scope searched exactly (`exact`:
    `reads_live`), else nothing. PostgreSQL inlines a CTE read once into its reader, making one
    larger query to plan; kept apart, each is planned as a small query of its own, which costs less
    to plan and, over the few rows each holds, nothing more to run.
    (A CTE read twice or more is materialized anyway: written on every CTE, it holds whichever are
    read once in a given plan.) A small scope's statement is planned at every call on a Citus
    worker (bench/RESULTS.md, "Planning a small scope's statement"). The statements of a scope with
    indexes of its own are left as they were: their CTEs read the facts through those indexes, and
    were not measured so."""
    return sql.SQL(" MATERIALIZED" if exact else "")


def live_cte(schema: str, plan: RecallPlan, access: ScopeAccess) -> Sequence[sql.Composable]:
    """`live` (id, valid_at, distance to %(qvec)s or NULL without a query embedding, tsv): the
    scope's live facts, MATERIALIZED so it is read once however many signals read it. Nothing
    for a plan whose signals read the facts themselves (a scope with indexes of its own).

    Read in id order, through the primary key: the order the facts were written in, so a heap page
    is fetched once for all the scope's facts on it. The valid-time bound is one no index answers
    (`fragments.where`, `by_valid_at`): a generic plan guesses it keeps a third of the facts (it
    keeps nearly all), and read through the `valid_at` index instead, in that order, the scan
    fetches a heap page per fact (bench/RESULTS.md, "The live facts in id order"). Nothing reads
    `live` in its order. With `plan.within`, only those facts, each looked up by the primary key."""
    if not reads_live(plan):
        return ()
    distance = sql.SQL("f.embedding <=> %(qvec)s" if plan.embedding else "NULL::float8")
    return (
        fragment(
            """
    live AS MATERIALIZED (
        SELECT f.id, f.valid_at, {distance} AS distance, f.tsv
        FROM {facts} f
        WHERE {live_where}
        ORDER BY f.id)""",
            schema,
            access=access,
            distance=distance,
            live_where=where("f", access=access, known=plan.known, by_valid_at=False, within=plan.within),
        ),
    )


LIVE_FACTS = SharedCtes(name="live facts", ctes=live_cte, params=lambda request: {})
