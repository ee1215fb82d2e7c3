"""The predicates every recall fragment carries, and the template helper that inserts them.

Every fragment carries the tenant, liveness and confidence predicates itself, so no signal ever
ranks a row that a later filter would drop.
"""

from __future__ import annotations

from psycopg import sql

from memsoda_core.layouts.access import SHARED, ScopeAccess
from memsoda_core.store.tenant_index import table_alias


def where(alias: str, *, access: ScopeAccess = SHARED, known: bool = False, by_valid_at: bool = True) -> sql.Composed:
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
        ).format(scope=scope, started=started, a=a)
    return sql.SQL(
        "{scope} AND {started} AND ({a}.invalid_at IS NULL OR {a}.invalid_at > %(at)s)"
        " AND {a}.confidence >= %(min_confidence)s"
    ).format(scope=scope, started=started, a=a)


_ALIASES = ("sc", "e", "fe", "b", "f", "a", "l")
_PREDICATES: dict[str, sql.Composable] = {"scope_" + alias: SHARED.tenant(alias) for alias in _ALIASES}
_WHERE_F = {False: where("f"), True: where("f", known=True)}


def fragment(
    template: str,
    schema: str,
    *,
    access: ScopeAccess = SHARED,
    known: bool = False,
    **parts: sql.Composable,
) -> sql.Composed:
    """`template` with {s} the schema, {where_f} the full predicate on facts `f` (`known`: as
    memory knew it at %(known_at)s, see `where`), {scope_x} the tenant predicate on alias x, and
    `parts`. {index_where_f} and {index_scope_e} are the predicates a scope's partial indexes must
    match. With `access.named` (see `statements.recall_statements`) every tenant predicate names the
    scope as literals: its partial indexes match, and on a partitioned store the plan PostgreSQL
    keeps is pruned to its partitions (a bound tenant would leave every partition in it, each
    locked at every run); else they are bound. {facts}, {entities} and {fact_entities}
    are those tables (`ScopeAccess.tables`)."""
    if access.named is None:
        predicates = {
            **_PREDICATES,
            "where_f": _WHERE_F[known],
            "index_where_f": _WHERE_F[known],
            "index_scope_e": _PREDICATES["scope_e"],
        }
    else:  # every table named with the scope: on a partitioned store the kept plan holds its partitions only
        own = {"scope_" + alias: access.tenant(alias) for alias in _ALIASES}
        whole = where("f", access=access, known=known)
        predicates = {**own, "where_f": whole, "index_where_f": whole, "index_scope_e": own["scope_e"]}
    tables = access.tables(schema)
    used = {key: value for key, value in {**predicates, **tables}.items() if "{" + key + "}" in template}
    return sql.SQL(template).format(s=sql.Identifier(schema), **used, **parts)
