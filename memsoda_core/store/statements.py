"""SQL builders of the write path. Pure: each returns a `sql.Composed`; values are always bound."""

from __future__ import annotations

from psycopg import sql

_FACT_COLUMNS = sql.SQL(
    """f.id, f.dataset, f.project, f.subject, f.predicate, f.object, f.object_type,
       a.name AS anchor, a.type AS anchor_type,
       ARRAY(SELECT m.name FROM {s}.fact_entities fm
             JOIN {s}.entities m ON m.dataset = fm.dataset AND m.project = fm.project AND m.id = fm.entity_id
             WHERE fm.dataset = f.dataset AND fm.project = f.project AND fm.fact_id = f.id
               AND fm.roles & 4 <> 0
             ORDER BY m.name) AS mentions,
       f.valid_at, f.invalid_at, f.confidence, f.source_quote, f.created_at"""
)
"""The columns `rows.decode_fact` reads, in its order. Needs `f` (facts) and `a` (anchor entity)."""


def fact_columns(schema: str) -> sql.Composed:
    return _FACT_COLUMNS.format(s=sql.Identifier(schema))


def known_entities(schema: str, *, lock: bool = False) -> sql.Composed:
    """(name, id) of those of %(names)s the scope already has. With `lock`, they are locked FOR KEY
    SHARE until the write commits: a concurrent `forget` cannot delete them in between (other
    writers are not blocked), so their stored name embeddings can be reused instead of embedding
    the names again."""
    return sql.SQL(
        """SELECT name, id FROM {s}.entities
           WHERE dataset = %(dataset)s AND project = %(project)s AND name = ANY(%(names)b::text[])
           ORDER BY name{lock}"""
    ).format(s=sql.Identifier(schema), lock=sql.SQL(" FOR KEY SHARE" if lock else ""))


def insert_entities(schema: str) -> sql.Composed:
    """Create the entities %(names)s the scope does not have, with no facts counted yet, and return
    (id, name) of those created and of those this statement finds already there (another writer's),
    locked FOR KEY SHARE (a concurrent `forget` waits; other writers do not). Nothing existing is
    updated here, so writers into one scope do not wait for each other through the rest of the
    write; the counts are added at its end (`bump_entities`). A name that another writer created
    and committed while this statement waited for it is missing from the result: run it again."""
    return sql.SQL(
        """WITH added AS (
               INSERT INTO {s}.entities AS e (dataset, project, name, type, embedding, fact_count)
               SELECT %(dataset)s, %(project)s, u.name, u.type, u.embedding, 0
               FROM unnest(%(names)b::text[], %(types)b::text[], %(embeddings)b::vector[])
                    AS u(name, type, embedding)
               ON CONFLICT (dataset, project, name) DO NOTHING
               RETURNING e.id, e.name),
           present AS (
               SELECT e.id, e.name FROM {s}.entities e
               WHERE e.dataset = %(dataset)s AND e.project = %(project)s AND e.name = ANY(%(names)b::text[])
               FOR KEY SHARE)
           SELECT id, name FROM added UNION ALL SELECT id, name FROM present"""
    ).format(s=sql.Identifier(schema))


def bump_entities(schema: str) -> sql.Composed:
    """Add %(touches)s facts to the counts of the scope's entities %(names)s (sorted) and keep a
    specific type of %(types)s over OTHER. Every one of them exists: created at the start of the
    write (`insert_entities`) or locked FOR KEY SHARE since, so no `forget` removed it.

    An upsert that always conflicts rather than an UPDATE: INSERT ... SELECT takes the rows in the
    order given, so two writers wait for each other instead of deadlocking, which an UPDATE's join
    does not promise. The proposed row copies the stored embedding because NOT NULL is checked
    before ON CONFLICT resolves. A write runs this at its end (`ops.bump_counts`), so it holds the
    rows only until it commits."""
    return sql.SQL(
        """INSERT INTO {s}.entities AS e (dataset, project, name, type, embedding, fact_count)
           SELECT %(dataset)s, %(project)s, u.name, u.type,
                  (SELECT k.embedding FROM {s}.entities k
                   WHERE k.dataset = %(dataset)s AND k.project = %(project)s AND k.name = u.name),
                  u.touches
           FROM unnest(%(names)b::text[], %(types)b::text[], %(touches)b::int[]) AS u(name, type, touches)
           ON CONFLICT (dataset, project, name) DO UPDATE
           SET type = CASE WHEN e.type = 'OTHER' THEN EXCLUDED.type ELSE e.type END,
               fact_count = e.fact_count + EXCLUDED.fact_count"""
    ).format(s=sql.Identifier(schema))


def insert_facts(schema: str) -> sql.Composed:
    """Insert a batch of facts in the given order, so their ids ascend in that order; returns (id,
    lexemes) of each, the lexemes for `count_lexemes`."""
    return sql.SQL(
        """INSERT INTO {s}.facts (dataset, project, subject, predicate, object, object_type,
                                 subject_id, object_id, anchor_id, valid_at, invalid_at,
                                 confidence, source_quote, embedding)
           SELECT %(dataset)s, %(project)s, u.subject, u.predicate, u.object, u.object_type,
                  u.subject_id, u.object_id, u.anchor_id, u.valid_at, u.invalid_at,
                  u.confidence, u.source_quote, u.embedding
           FROM unnest(%(subjects)b::text[], %(predicates)b::text[], %(objects)b::text[],
                       %(object_types)b::text[], %(subject_ids)b::bigint[], %(object_ids)b::bigint[],
                       %(anchor_ids)b::bigint[], %(valid_ats)b::timestamptz[],
                       %(invalid_ats)b::timestamptz[], %(confidences)b::real[],
                       %(quotes)b::text[], %(embeddings)b::vector[])
                WITH ORDINALITY AS u(subject, predicate, object, object_type, subject_id, object_id,
                                     anchor_id, valid_at, invalid_at, confidence, source_quote,
                                     embedding, ord)
           ORDER BY u.ord
           RETURNING id, tsvector_to_array(tsv)"""
    ).format(s=sql.Identifier(schema))


def count_lexemes(schema: str) -> sql.Composed:
    """Add %(counts)s facts to the scope's count of each of %(lexemes)s (`schema._v4`), upserted in
    lexeme order, so two writers into one scope wait for each other instead of deadlocking; a write
    runs this at its end, so it holds the rows only until it commits."""
    return sql.SQL(
        """INSERT INTO {s}.lexemes AS l (dataset, project, lexeme, facts)
           SELECT %(dataset)s, %(project)s, u.lexeme, u.facts
           FROM unnest(%(lexemes)b::text[], %(counts)b::int[]) AS u(lexeme, facts)
           ORDER BY u.lexeme
           ON CONFLICT (dataset, project, lexeme) DO UPDATE SET facts = l.facts + EXCLUDED.facts"""
    ).format(s=sql.Identifier(schema))


def insert_fact_entities(schema: str) -> sql.Composed:
    return sql.SQL(
        """INSERT INTO {s}.fact_entities (dataset, project, fact_id, entity_id, roles)
           SELECT %(dataset)s, %(project)s, u.fact_id, u.entity_id, u.roles
           FROM unnest(%(fact_ids)b::bigint[], %(entity_ids)b::bigint[], %(roles)b::smallint[])
                AS u(fact_id, entity_id, roles)"""
    ).format(s=sql.Identifier(schema))


def bump_scope(schema: str) -> sql.Composed:
    """Add `delta` to the scope's fact count, creating the scope row on its first write."""
    return sql.SQL(
        """INSERT INTO {s}.scopes AS sc (dataset, project, fact_count)
           VALUES (%(dataset)s, %(project)s, %(delta)s)
           ON CONFLICT (dataset, project) DO UPDATE SET fact_count = sc.fact_count + EXCLUDED.fact_count"""
    ).format(s=sql.Identifier(schema))


def facts_pages() -> sql.Composed:
    """(pages of the facts table at its last ANALYZE, pages now) for schema %(schema)s."""
    return sql.SQL(
        """SELECT c.relpages, pg_relation_size(c.oid) / current_setting('block_size')::int
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %(schema)s AND c.relname = 'facts'"""
    ).format()


def invalidate_fact(schema: str) -> sql.Composed:
    """Close a fact's validity at `at`. Returns (id, valid_at, invalid_at before the change)."""
    return sql.SQL(
        """WITH old AS (
               SELECT id, valid_at, invalid_at FROM {s}.facts
               WHERE dataset = %(dataset)s AND project = %(project)s AND id = %(id)s FOR UPDATE)
           UPDATE {s}.facts f SET invalid_at = %(at)s
           FROM old
           WHERE f.dataset = %(dataset)s AND f.project = %(project)s AND f.id = old.id
             AND old.valid_at < %(at)s AND (old.invalid_at IS NULL OR old.invalid_at > %(at)s)
           RETURNING f.id"""
    ).format(s=sql.Identifier(schema))


def fact_interval(schema: str) -> sql.Composed:
    return sql.SQL(
        """SELECT valid_at, invalid_at FROM {s}.facts
           WHERE dataset = %(dataset)s AND project = %(project)s AND id = %(id)s"""
    ).format(s=sql.Identifier(schema))


def insert_episodes(schema: str) -> sql.Composed:
    return sql.SQL(
        """INSERT INTO {s}.episodes (dataset, project, thread_id, text, created_at, embedding)
           SELECT %(dataset)s, %(project)s, u.thread_id, u.text, u.created_at, u.embedding
           FROM unnest(%(thread_ids)b::text[], %(texts)b::text[], %(created_ats)b::timestamptz[],
                       %(embeddings)b::vector[]) WITH ORDINALITY AS u(thread_id, text, created_at, embedding, ord)
           ORDER BY u.ord
           RETURNING id"""
    ).format(s=sql.Identifier(schema))


def forget_entity(schema: str) -> sql.Composed:
    """Delete every fact touching the entity, fix the counts of the other entities, the scope and
    its lexemes, then delete the entity. Returns the number of facts deleted."""
    return sql.SQL(
        """WITH target AS (
               SELECT id FROM {s}.entities
               WHERE dataset = %(dataset)s AND project = %(project)s AND name = %(name)s),
           doomed AS (
               SELECT DISTINCT fe.fact_id FROM {s}.fact_entities fe
               WHERE fe.dataset = %(dataset)s AND fe.project = %(project)s
                 AND fe.entity_id IN (SELECT id FROM target)),
           touched AS (
               SELECT fe.entity_id, count(*) AS n FROM {s}.fact_entities fe
               WHERE fe.dataset = %(dataset)s AND fe.project = %(project)s
                 AND fe.fact_id IN (SELECT fact_id FROM doomed)
                 AND fe.entity_id NOT IN (SELECT id FROM target)
               GROUP BY fe.entity_id),
           recount AS (
               UPDATE {s}.entities e SET fact_count = e.fact_count - touched.n
               FROM touched
               WHERE e.dataset = %(dataset)s AND e.project = %(project)s AND e.id = touched.entity_id),
           gone AS (
               DELETE FROM {s}.facts f
               WHERE f.dataset = %(dataset)s AND f.project = %(project)s
                 AND f.id IN (SELECT fact_id FROM doomed)
               RETURNING f.id, f.tsv),
           uncounted AS (
               UPDATE {s}.lexemes l SET facts = l.facts - d.n
               FROM (SELECT x.lexeme, count(*) AS n
                     FROM gone g CROSS JOIN LATERAL unnest(tsvector_to_array(g.tsv)) AS x(lexeme)
                     GROUP BY x.lexeme) d
               WHERE l.dataset = %(dataset)s AND l.project = %(project)s AND l.lexeme = d.lexeme),
           scope AS (
               UPDATE {s}.scopes sc SET fact_count = sc.fact_count - (SELECT count(*) FROM gone)
               WHERE sc.dataset = %(dataset)s AND sc.project = %(project)s)
           SELECT count(*) FROM gone"""
    ).format(s=sql.Identifier(schema))


def delete_orphan_entities(schema: str) -> sql.Composed:
    """Remove the scope's entities no fact touches any more (after `forget_entity`): the forgotten
    entity itself, and others whose only facts went with it."""
    return sql.SQL(
        """DELETE FROM {s}.entities e
           WHERE e.dataset = %(dataset)s AND e.project = %(project)s
             AND (e.fact_count <= 0 OR e.name = %(name)s)
             AND NOT EXISTS (SELECT 1 FROM {s}.fact_entities fe
                             WHERE fe.dataset = e.dataset AND fe.project = e.project AND fe.entity_id = e.id)
             AND NOT EXISTS (SELECT 1 FROM {s}.facts f
                             WHERE f.dataset = e.dataset AND f.project = e.project
                               AND (f.subject_id = e.id OR f.anchor_id = e.id))"""
    ).format(s=sql.Identifier(schema))


def delete_spent_lexemes(schema: str) -> sql.Composed:
    """Remove the scope's lexeme counts that `forget_entity` brought to zero."""
    return sql.SQL(
        "DELETE FROM {s}.lexemes WHERE dataset = %(dataset)s AND project = %(project)s AND facts <= 0"
    ).format(s=sql.Identifier(schema))


def analyze(schema: str) -> list[sql.Composed]:
    """Refresh planner statistics of the tables recall reads."""
    s = sql.Identifier(schema)
    return [
        sql.SQL("ANALYZE {s}.{t}").format(s=s, t=sql.Identifier(table))
        for table in ("facts", "entities", "fact_entities", "lexemes", "episodes", "scopes")
    ]


def forget_scope(schema: str) -> list[sql.Composed]:
    """Delete everything of one (dataset, project), children first."""
    s = sql.Identifier(schema)
    where = sql.SQL("WHERE dataset = %(dataset)s AND project = %(project)s")
    return [
        sql.SQL("DELETE FROM {s}.{t} {where}").format(s=s, t=sql.Identifier(table), where=where)
        for table in ("fact_entities", "facts", "lexemes", "entities", "episodes", "scopes")
    ]


def count_facts(schema: str) -> sql.Composed:
    return sql.SQL("SELECT count(*) FROM {s}.facts WHERE dataset = %(dataset)s AND project = %(project)s").format(
        s=sql.Identifier(schema)
    )


def export_facts(schema: str) -> sql.Composed:
    """Every fact of a scope, with subject/object types, in id order, by keyset pages."""
    return sql.SQL(
        """SELECT {cols}, st.type AS subject_type
           FROM {s}.facts f
           JOIN {s}.entities a ON a.dataset = f.dataset AND a.project = f.project AND a.id = f.anchor_id
           JOIN {s}.entities st ON st.dataset = f.dataset AND st.project = f.project AND st.id = f.subject_id
           WHERE f.dataset = %(dataset)s AND f.project = %(project)s AND f.id > %(after)s
           ORDER BY f.id
           LIMIT %(limit)s"""
    ).format(s=sql.Identifier(schema), cols=fact_columns(schema))


def export_episodes(schema: str) -> sql.Composed:
    return sql.SQL(
        """SELECT id, thread_id, text, created_at FROM {s}.episodes
           WHERE dataset = %(dataset)s AND project = %(project)s ORDER BY id"""
    ).format(s=sql.Identifier(schema))


def stats(schema: str) -> sql.Composed:
    """Per scope: facts, live facts (now), entities, episodes."""
    return sql.SQL(
        """SELECT sc.dataset, sc.project,
                  (SELECT count(*) FROM {s}.facts f WHERE f.dataset = sc.dataset AND f.project = sc.project),
                  (SELECT count(*) FROM {s}.facts f WHERE f.dataset = sc.dataset AND f.project = sc.project
                     AND f.valid_at <= now() AND (f.invalid_at IS NULL OR f.invalid_at > now())),
                  (SELECT count(*) FROM {s}.entities e WHERE e.dataset = sc.dataset AND e.project = sc.project),
                  (SELECT count(*) FROM {s}.episodes p WHERE p.dataset = sc.dataset AND p.project = sc.project)
           FROM {s}.scopes sc
           WHERE (%(dataset)s::text IS NULL OR sc.dataset = %(dataset)s)
             AND (%(project)s::text IS NULL OR sc.project = %(project)s)
           ORDER BY sc.dataset, sc.project"""
    ).format(s=sql.Identifier(schema))


def ensure_scope(schema: str) -> sql.Composed:
    return sql.SQL(
        """INSERT INTO {s}.scopes (dataset, project) VALUES (%(dataset)s, %(project)s)
           ON CONFLICT (dataset, project) DO NOTHING"""
    ).format(s=sql.Identifier(schema))
