"""SQL of the per-scope lexeme counts (`schema._v4`): how many of a scope's facts hold each keyword
lexeme, so recall can leave out a query term too common in the scope to say which fact is meant."""

from __future__ import annotations

from psycopg import sql

from memsoda_core.store.tenant_index import table_alias, tenant_predicate


def fact_lexemes(alias: str | None = None) -> sql.Composed:
    """The lexemes of a fact (of `alias`, if given), each once: what every count counts. The write
    path counts them in Python from the facts insert's result (`writing.inserts.FACTS`),
    `deleting.delete_facts` and `recount_lexemes` in SQL, all through this one expression."""
    tsv = sql.SQL("{}.tsv").format(table_alias(alias)) if alias else sql.SQL("tsv")
    return sql.SQL("tsvector_to_array({})").format(tsv)


def recount_lexemes(schema: str, *, scoped: bool) -> sql.Composed:
    """Set the counts from the facts stored: of every scope, or with `scoped` of %(dataset)s /
    %(project)s alone. The v4 migration fills the table with it (so an upgraded store counts what
    writes count), and the speed bench after loading rows with COPY."""
    where = sql.SQL("WHERE {} ").format(tenant_predicate("f")) if scoped else sql.SQL("")
    return sql.SQL(
        """INSERT INTO {s}.lexemes AS l (dataset, project, lexeme, facts)
           SELECT f.dataset, f.project, x.lexeme, count(*)
           FROM {s}.facts f CROSS JOIN LATERAL unnest({lexemes}) AS x(lexeme)
           {where}GROUP BY f.dataset, f.project, x.lexeme
           ON CONFLICT (dataset, project, lexeme) DO UPDATE SET facts = EXCLUDED.facts"""
    ).format(s=sql.Identifier(schema), lexemes=fact_lexemes("f"), where=where)


def delete_spent_lexemes(schema: str) -> sql.Composed:
    """Remove the scope's lexeme counts that `deleting.delete_facts` brought to zero."""
    return sql.SQL("DELETE FROM {s}.lexemes WHERE {tenant} AND facts <= 0").format(
        s=sql.Identifier(schema), tenant=tenant_predicate()
    )
