"""The predicates every recall fragment carries, and the template helper that inserts them.

Every fragment carries the tenant, liveness and confidence predicates itself, so no signal ever
ranks a row that a later filter would drop; and so does the restriction of a recall to given
facts (`RecallPlan.within`: an item search's filter), so that no signal lists a fact outside them.
"""

from __future__ import annotations

import itertools

from psycopg import sql

from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.store.tenant_index import table_alias

WITHIN = " AND {a}.id = ANY(%(within)b::bigint[])"
"""SQL template: the fact `a` is one of %(within)s (`RecallPlan.within`), looked up by the primary key
with the tenant predicate beside it."""


def within_facts(alias: str, within: bool) -> sql.Composable:
    """` AND <alias>.id = ANY(%(within)b::bigint[])` with `within` (`RecallPlan.within`), else nothing."""
    return sql.SQL(WITHIN).format(a=table_alias(alias)) if within else sql.SQL("")


def where(
    alias: str, *, access: ScopeAccess = SHARED, known: bool = False, by_valid_at: bool = True, within: bool = False
) -> sql.Composed:
    """The tenant predicate on `alias` (`ScopeAccess.tenant`: the scope's names as literals, or
    bound), valid at %(at)s and at or above the confidence floor. With `known`, live as memory
    knew it at %(known_at)s (transaction time): learned by then (`created_at`), and an end it
    recorded after then (`expired_at`) does not count. Without it the text is the plain valid-time
    test: the default recall statements carry nothing of a feature they do not use. Without
    `by_valid_at` the start bound is written `(... <= %(at)s) IS TRUE` (`valid_at` is never NULL: the
    same test), which no index answers: for a read of the scope's every live fact
    (`signals.live`), not through the `valid_at` index."""
    a = table_alias(alias)
    scope = access.tenant(alias)
    started = sql.SQL("{a}.valid_at <= %(at)s" if by_valid_at else "({a}.valid_at <= %(at)s) IS TRUE").format(a=a)
    if known:
        return sql.SQL(
            "{scope} AND {started} AND {a}.created_at <= %(known_at)s AND ({a}.invalid_at IS NULL"
            " OR {a}.invalid_at > %(at)s OR {a}.expired_at > %(known_at)s) AND {a}.confidence >= %(min_confidence)s"
            "{within}"
        ).format(scope=scope, started=started, a=a, within=within_facts(alias, within))
    return sql.SQL(
        "{scope} AND {started} AND ({a}.invalid_at IS NULL OR {a}.invalid_at > %(at)s)"
        " AND {a}.confidence >= %(min_confidence)s{within}"
    ).format(scope=scope, started=started, a=a, within=within_facts(alias, within))


_ALIASES = ("sc", "e", "fe", "b", "f", "a", "l")
_PREDICATES: dict[str, sql.Composable] = {"scope_" + alias: SHARED.tenant(alias) for alias in _ALIASES}
_WHERE_F = {
    (known, within): where("f", known=known, within=within)
    for known, within in itertools.product((False, True), repeat=2)
}


def fragment(
    template: str,
    schema: str,
    *,
    access: ScopeAccess = SHARED,
    known: bool = False,
    within: bool = False,
    **parts: sql.Composable,
) -> sql.Composed:
    """`template` with {s} the schema, {where_f} the full predicate on facts `f` (`known`: as
    memory knew it at %(known_at)s, see `where`), {scope_x} the tenant predicate on alias x, and
    `parts`. {index_where_f} and {index_scope_e} are the predicates a scope's partial indexes must
    match; with `within`, both also restrict `f` to the facts %(within)s (`RecallPlan.within`).
    With `access.named` (see `statements.recall_statements`) every tenant predicate names the
    scope as literals: its partial indexes match, and on a partitioned store the plan PostgreSQL
    keeps is pruned to its partitions (a bound tenant would leave every partition in it, each
    locked at every run); else they are bound. {facts}, {entities} and {fact_entities}
    are those tables (`ScopeAccess.tables`)."""
    if access.named is None:
        predicates = {
            **_PREDICATES,
            "where_f": _WHERE_F[known, within],
            "index_where_f": _WHERE_F[known, within],
            "index_scope_e": _PREDICATES["scope_e"],
        }
    else:  # every table named with the scope: on a partitioned store the kept plan holds its partitions only
        own = {"scope_" + alias: access.tenant(alias) for alias in _ALIASES}
        whole = where("f", access=access, known=known, within=within)
        predicates = {**own, "where_f": whole, "index_where_f": whole, "index_scope_e": own["scope_e"]}
    tables = access.tables(schema)
    used = {key: value for key, value in {**predicates, **tables}.items() if "{" + key + "}" in template}
    return sql.SQL(template).format(s=sql.Identifier(schema), **used, **parts)
