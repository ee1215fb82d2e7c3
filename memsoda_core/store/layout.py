"""SQL of the partitioned tenant layout: a large tenant's rows in partitions of their own.

Partial indexes per large tenant on one shared table made every write open every tenant's
indexes and every new tenant's index build scan the whole table (bench/RESULTS.md, "Tenant
layouts"). In this layout the tables a tenant's foreign keys join (`PARTITIONED`) are LIST
partitions by dataset. The tables memsoda had become their DEFAULT partitions (`<table>_shared`,
no row moves), where every small tenant stays. A tenant that grows large moves, in one
transaction, to a partition of its dataset (`<table>_d<key>`, LIST by project), whose leaf
(`<table>_t<key>`) holds that tenant alone and gets ordinary HNSW and GIN indexes; the
dataset's other projects share its DEFAULT (`<table>_d<key>_rest`). Foreign keys join leaf to
leaf, so no check ever reads a partitioned table.

A write names the partitioned tables and is planned afresh, so PostgreSQL prunes it to one
partition before planning. A kept (generic) plan over a partitioned table would hold every
partition and lock all of them at each run, so a small scope's recall names the DEFAULT
partitions themselves and a large one names its tenant as literals (`recall.fragments`).

Citus does not take part: it distributes the tables as they were (`distributed.py`), and a large
tenant gets a shard of its own instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from psycopg import sql

from memsoda_core.store.schema import ENTITY_FILLFACTOR
from memsoda_core.store.template import schema_sql
from memsoda_core.store.tenant_index import TenantIndex, tenant_key
from memsoda_core.validation import Scope

PARTITIONED = ("entities", "facts", "fact_entities", "fact_sources")
"""Referenced tables first: the order rows are copied and partitions attached in."""

LAYOUT_KEY = "layout"
"""Meta key: the store's layout, one of `layouts.REGISTRY`, chosen when it is created (or upgraded to v9)."""

IDENTITY = {"entities": "ALWAYS", "facts": "BY DEFAULT", "fact_sources": "ALWAYS"}
"""Each table's identity (schema v1, v8). A partition may not have one: it moves to the parent."""

KEYS = {
    "entities": ("PRIMARY KEY (dataset, project, id)", "UNIQUE (dataset, project, name)"),
    "facts": ("PRIMARY KEY (dataset, project, id)",),
    "fact_entities": ("PRIMARY KEY (dataset, project, entity_id, fact_id)",),
    "fact_sources": ("PRIMARY KEY (dataset, project, fact_id, id)",),
}
"""The unique keys of each table, (dataset, project) first: the parent's, which every partition
gets (the DEFAULT one keeps the index it has)."""

INDEXES = {
    "facts_recent": ("facts", "(dataset, project, valid_at DESC, id DESC)"),
    "facts_relation": ("facts", "(dataset, project, subject, lower(predicate))"),
    "facts_superseded_by": ("facts", "(dataset, project, superseded_by) WHERE superseded_by IS NOT NULL"),
    "facts_ended": ("facts", "(dataset, project, invalid_at) WHERE invalid_at IS NOT NULL"),
    "fact_entities_fact": ("fact_entities", "(dataset, project, fact_id)"),
}
"""The other b-trees of the partitioned tables (schema v1, v5, v10), defined on the parent so that
every partition has them; a test holds this to the migrations."""

FOREIGN_KEYS = (  # (table, column, referenced table, ON DELETE): schema v1 and v8
    ("facts", "subject_id", "entities", ""),
    ("facts", "anchor_id", "entities", ""),
    ("fact_entities", "fact_id", "facts", " ON DELETE CASCADE"),
    ("fact_entities", "entity_id", "entities", " ON DELETE CASCADE"),
    ("fact_sources", "fact_id", "facts", " ON DELETE CASCADE"),
)

STORAGE = {"entities": f" WITH (fillfactor = {ENTITY_FILLFACTOR})"}
"""Storage parameters a table's partitions repeat (a partitioned table has none to pass on):
half-full entity pages keep the count bumps of every write HOT (`store.schema.ENTITY_FILLFACTOR`)."""

MOVE_LOCK_TIMEOUT = "1s"
"""How long a move waits for its dataset's writers (the move lock); it then gives up, rolled back
whole, and the next write into the tenant tries again."""

MOVE_DEADLOCK_TIMEOUT = "50ms"
"""The move's own `deadlock_timeout` while it locks the DEFAULT partitions it moves rows out of
(ACCESS EXCLUSIVE, all four in one statement, before anything else). A reader or writer locks the
tables of its statement one after the other, so a move holding one of them while waiting for
another can close a wait cycle with it. The process whose deadlock check runs first is the one that
fails, and each runs its check `deadlock_timeout` (1 s by default) after it began to wait: with
50 ms the move checks first, rolls back and is tried again (`MOVE_ATTEMPTS`), and no reader ever
gets a deadlock error. The same check cancels an autovacuum of those partitions that the move waits
for, as PostgreSQL does for any lock request an autovacuum blocks. Setting it needs the SET
privilege on it (a superuser has it, as on the embedded server)."""

EXCLUSIVE_LOCK_TIMEOUT = "50ms"
"""Without that privilege, the move gives up its wait for the DEFAULT partitions after this instead,
well before the others' deadlock checks (an autovacuum it waits for then finishes first)."""

MOVE_ATTEMPTS = 3
"""A move that gave up a lock wait is tried again at once this many times in all, then by the next
write into the tenant."""


def _renamed(table: str) -> list[tuple[str, str]]:
    """(index name on the plain table, its name on the DEFAULT partition) of `table`'s indexes."""
    keys = ("pkey", "dataset_project_name_key") if table == "entities" else ("pkey",)
    names = [(f"{table}_{suffix}", f"{shared(table)}_{suffix}") for suffix in keys]
    return names + [(name, f"{name}_shared") for name, (owner, _) in INDEXES.items() if owner == table]


def shared(table: str) -> str:
    """The DEFAULT partition of `table`: every scope's rows until its dataset has a partition."""
    return f"{table}_shared"


READ_TABLES = ("facts", "entities", "fact_entities", "scopes", "lexemes")
"""The tables a read's template names by key (`table_refs`): what a recall statement reads."""


def table_refs(
    schema: str,
    *,
    default_partitions: bool = False,
    leaves: Scope | None = None,
    shards: Mapping[str, str] | None = None,
) -> dict[str, sql.Composable]:
    """{facts}, {entities}, {fact_entities}, {scopes} and {lexemes} for a read's template: the
    tables, with `default_partitions` the DEFAULT partitions of the first three by name (a small
    scope's reads: a kept plan over a partitioned table would lock every partition at each run),
    with `leaves` that moved scope's own leaves by name (`tenant_tables`: planning then opens no
    partitioned table and prunes nothing), or with `shards` a Citus worker's shards by name (table
    -> shard, `layouts.shards`). memsoda's own plain table names, unquoted as they always were (a
    leaf's name is lower-case letters, digits and underscores)."""
    refs: dict[str, str] = {name: name for name in READ_TABLES}
    if shards is not None:
        return {name: sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(shards[name])) for name in refs}
    for name in ("facts", "entities", "fact_entities"):
        if leaves is not None:
            refs[name] = tenant_tables(name, leaves).leaf
        elif default_partitions:
            refs[name] = shared(name)
    return {name: sql.SQL("{}.{}").format(sql.Identifier(schema), sql.SQL(table)) for name, table in refs.items()}


@dataclass(frozen=True)
class TenantTables:
    """Where a tenant's rows of one table go when it moves."""

    dataset: str
    """Its dataset's partition (LIST by project)."""
    leaf: str
    """The tenant's own leaf."""
    rest: str
    """The DEFAULT partition of its dataset's partition: the dataset's other projects."""


def tenant_tables(table: str, scope: Scope) -> TenantTables:
    key = tenant_key(Scope(dataset=scope.dataset, project=""))
    return TenantTables(f"{table}_d{key}", f"{table}_t{tenant_key(scope)}", f"{table}_d{key}_rest")


def leaf_indexes(scope: Scope) -> tuple[TenantIndex, ...]:
    """A moved tenant's vector and keyword indexes, on its leaves (no predicate)."""
    facts, entities = tenant_tables("facts", scope).leaf, tenant_tables("entities", scope).leaf
    return (
        TenantIndex(f"{facts}_embedding", facts, "hnsw", "embedding vector_cosine_ops"),
        TenantIndex(f"{entities}_embedding", entities, "hnsw", "embedding vector_cosine_ops"),
        TenantIndex(f"{facts}_tsv", facts, "gin", "tsv"),
    )


def analyze_leaf(schema: str, table: str, scope: Scope) -> sql.Composed:
    return schema_sql("ANALYZE {s}.{t}", schema, t=sql.Identifier(tenant_tables(table, scope).leaf))


def create_leaf_index(schema: str, index: TenantIndex) -> sql.Composed:
    return schema_sql(
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS {n} ON {s}.{t} USING {m} ({c})",
        schema,
        n=sql.Identifier(index.name),
        t=sql.Identifier(index.table),
        m=sql.SQL(index.method),
        c=sql.SQL(index.column),
    )


# --- the layout itself -------------------------------------------------------------------------------------


def partition_statements(schema: str) -> list[sql.Composed]:
    """Today's tables become the DEFAULT partitions of new parents of the same names: a catalog
    change, no row is copied. Each identity moves to its parent and continues from the old
    sequence's last value, so no id is ever given twice."""
    out: list[sql.Composed] = []
    for table in PARTITIONED:
        t, old = sql.Identifier(table), sql.Identifier(shared(table))
        out.append(schema_sql("ALTER TABLE {s}.{t} RENAME TO {old}", schema, t=t, old=old))
        for was, now in _renamed(table):
            out.append(
                schema_sql(
                    "ALTER INDEX {s}.{was} RENAME TO {now}", schema, was=sql.Identifier(was), now=sql.Identifier(now)
                )
            )
        out.append(
            schema_sql(
                "CREATE TABLE {s}.{t} (LIKE {s}.{old} INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS"
                " INCLUDING IDENTITY) PARTITION BY LIST (dataset)",
                schema,
                t=t,
                old=old,
            )
        )
        if table in IDENTITY:
            out.append(
                schema_sql(
                    """SELECT setval(pg_get_serial_sequence({new}, 'id'),
                                     greatest(coalesce(pg_sequence_last_value(
                                                  pg_get_serial_sequence({was}, 'id')::regclass), 0),
                                              (SELECT coalesce(max(id), 0) FROM {s}.{old}), 1))""",
                    schema,
                    new=sql.Literal(f"{sql.Identifier(schema, table).as_string(None)}"),
                    was=sql.Literal(f"{sql.Identifier(schema, shared(table)).as_string(None)}"),
                    old=old,
                )
            )
            out.append(schema_sql("ALTER TABLE {s}.{old} ALTER COLUMN id DROP IDENTITY", schema, old=old))
        for key in KEYS[table]:
            out.append(schema_sql("ALTER TABLE {s}.{t} ADD " + key, schema, t=t))
        for name, (owner, definition) in INDEXES.items():
            if owner == table:
                # on the attach below, the DEFAULT partition's equal index becomes its partition (no build)
                out.append(schema_sql("CREATE INDEX {n} ON {s}.{t} " + definition, schema, n=sql.Identifier(name), t=t))
        out.append(schema_sql("ALTER TABLE {s}.{t} ATTACH PARTITION {s}.{old} DEFAULT", schema, t=t, old=old))
    return out


def unpartition_statements(schema: str) -> list[sql.Composed]:
    """`partition_statements` undone, for a store no tenant has moved out of (`distributed.py`:
    Citus distributes plain tables): the DEFAULT partitions become the tables again."""
    out = [schema_sql("CREATE TEMP TABLE memsoda_ids (name text PRIMARY KEY, last bigint) ON COMMIT DROP", schema)]
    for table in reversed(PARTITIONED):
        t, old = sql.Identifier(table), sql.Identifier(shared(table))
        out.append(schema_sql("ALTER TABLE {s}.{t} DETACH PARTITION {s}.{old}", schema, t=t, old=old))
        if table in IDENTITY:
            out.append(
                schema_sql(
                    "INSERT INTO memsoda_ids"
                    " SELECT {n}, pg_sequence_last_value(pg_get_serial_sequence({p}, 'id')::regclass)",
                    schema,
                    n=sql.Literal(table),
                    p=sql.Literal(sql.Identifier(schema, table).as_string(None)),
                )
            )
        out.append(schema_sql("DROP TABLE {s}.{t}", schema, t=t))
        out.append(schema_sql("ALTER TABLE {s}.{old} RENAME TO {t}", schema, t=t, old=old))
        for now, was in _renamed(table):
            out.append(
                schema_sql(
                    "ALTER INDEX {s}.{was} RENAME TO {now}", schema, was=sql.Identifier(was), now=sql.Identifier(now)
                )
            )
        if table in IDENTITY:
            out.append(
                schema_sql(
                    f"ALTER TABLE {{s}}.{{t}} ALTER COLUMN id ADD GENERATED {IDENTITY[table]} AS IDENTITY", schema, t=t
                )
            )
            out.append(
                schema_sql(
                    """SELECT setval(pg_get_serial_sequence({p}, 'id'),
                                     greatest((SELECT coalesce(max(last), 0) FROM memsoda_ids WHERE name = {n}),
                                              (SELECT coalesce(max(id), 0) FROM {s}.{t}), 1))""",
                    schema,
                    p=sql.Literal(sql.Identifier(schema, table).as_string(None)),
                    n=sql.Literal(table),
                    t=t,
                )
            )
    return out


# --- moving a tenant ---------------------------------------------------------------------------------------


def columns_statement(schema: str) -> sql.Composed:
    """(table, its stored columns in order: generated ones are computed again) of `PARTITIONED`."""
    return schema_sql(
        """SELECT t.name AS "table", array_agg(a.attname::text ORDER BY a.attnum) AS columns
           FROM unnest(%(tables)s::text[]) AS t(name)
           JOIN pg_attribute a ON a.attrelid = format('%%I.%%I', %(schema)s::text, t.name)::regclass
           WHERE a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
           GROUP BY t.name""",
        schema,
    )


@dataclass(frozen=True)
class TableColumns:
    """A row of `columns_statement`."""

    table: str
    columns: list[str]


def dataset_lock(schema: str, dataset: str | None = None) -> sql.Composed:
    """Until the transaction ends, the move lock of dataset %(dataset)s, shared; of `dataset`,
    alone (a move, whose statements take no parameters). Every write into a dataset of a
    partitioned store holds it from its first statement (`ops.writing.hold_dataset`), so no write
    lands between a move's copy and its commit."""
    function = "pg_advisory_xact_lock_shared" if dataset is None else "pg_advisory_xact_lock"
    name = sql.Placeholder("dataset") if dataset is None else sql.Literal(dataset)
    return sql.SQL(
        "SELECT {f}(hashtextextended(concat_ws(chr(31), 'memsoda-move', {schema}, {name}::text), 0))"
    ).format(f=sql.Identifier(function), schema=sql.Literal(schema), name=name)


def move_statements(
    schema: str, scope: Scope, columns: dict[str, list[str]], *, dataset_placed: bool
) -> list[sql.Composed]:
    """One transaction moving `scope` to its own leaves: the move lock, the partitions (of its
    dataset too, unless `dataset_placed`), the rows (one statement, so one snapshot: every row
    read is the one deleted), the attach (which checks that the partition moved from holds no row
    of the new one, so a row written meanwhile fails the move rather than being left behind), the
    leaf-to-leaf foreign keys, and the record in `tenant_partitions`. Values are literals: DDL
    takes no parameters."""
    d, p = sql.Literal(scope.dataset), sql.Literal(scope.project)
    tables = {table: tenant_tables(table, scope) for table in PARTITIONED}
    sources = [tables[table].rest if dataset_placed else shared(table) for table in PARTITIONED]
    timeout = "SET LOCAL lock_timeout = {}"
    out = [
        sql.SQL(timeout).format(sql.Literal(MOVE_LOCK_TIMEOUT)),
        dataset_lock(schema, scope.dataset),
        sql.SQL(
            """SELECT CASE WHEN has_parameter_privilege('deadlock_timeout', 'SET')
                           THEN set_config('deadlock_timeout', {deadlock}, true)
                           ELSE set_config('lock_timeout', {fallback}, true) END"""
        ).format(deadlock=sql.Literal(MOVE_DEADLOCK_TIMEOUT), fallback=sql.Literal(EXCLUSIVE_LOCK_TIMEOUT)),
        # Foreign-key checks off where the role may (no check can fail: every row moves with the
        # rows it refers to); deleting an entity otherwise reads the tenant's facts once per entity
        # (no index by entity). The leaves' keys are checked after, one query each.
        sql.SQL(
            """SELECT set_config('session_replication_role', 'replica', true)
               WHERE has_parameter_privilege('session_replication_role', 'SET')"""
        ).format(),
        schema_sql(
            "LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE",
            schema,
            tables=sql.SQL(", ").join(sql.Identifier(schema, source) for source in sources),
        ),
        sql.SQL(timeout).format(sql.Literal(MOVE_LOCK_TIMEOUT)),
    ]
    like = "(LIKE {s}.{t} INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS)"
    for table, names in tables.items():
        t, parent, leaf, rest = (sql.Identifier(n) for n in (table, names.dataset, names.leaf, names.rest))
        room = sql.SQL(STORAGE.get(table, ""))
        if dataset_placed:
            out.append(schema_sql("CREATE TABLE {s}.{leaf} " + like + "{room}", schema, leaf=leaf, t=t, room=room))
        else:
            out.append(
                schema_sql(
                    "CREATE TABLE {s}.{parent} " + like + " PARTITION BY LIST (project)", schema, parent=parent, t=t
                )
            )
            out.append(
                schema_sql(
                    "CREATE TABLE {s}.{leaf} PARTITION OF {s}.{parent} FOR VALUES IN ({p}){room}",
                    schema,
                    leaf=leaf,
                    parent=parent,
                    p=p,
                    room=room,
                )
            )
            out.append(
                schema_sql(
                    "CREATE TABLE {s}.{rest} PARTITION OF {s}.{parent} DEFAULT{room}",
                    schema,
                    rest=rest,
                    parent=parent,
                    room=room,
                )
            )
    ctes: list[sql.Composable] = []
    for n, table in enumerate(reversed(PARTITIONED)):  # the referencing rows first
        names = tables[table]
        source = names.rest if dataset_placed else shared(table)
        target = names.leaf if dataset_placed else names.dataset
        cols = sql.SQL(", ").join(map(sql.Identifier, columns[table]))
        which = sql.SQL("dataset = {d} AND project = {p}" if dataset_placed else "dataset = {d}").format(d=d, p=p)
        ctes.append(
            schema_sql(
                "gone{n} AS (DELETE FROM {s}.{source} WHERE {which} RETURNING {cols}),"
                " kept{n} AS (INSERT INTO {s}.{target} ({cols}) SELECT {cols} FROM gone{n} RETURNING 1)",
                schema,
                n=sql.SQL(str(n)),
                source=sql.Identifier(source),
                target=sql.Identifier(target),
                which=which,
                cols=cols,
            )
        )
    counts = sql.SQL(" + ").join(
        sql.SQL("(SELECT count(*) FROM kept{})").format(sql.SQL(str(n))) for n in range(len(PARTITIONED))
    )
    out.append(sql.SQL("WITH {ctes} SELECT {counts} AS moved").format(ctes=sql.SQL(", ").join(ctes), counts=counts))
    for table, names in tables.items():
        if dataset_placed:
            out.append(
                schema_sql(
                    "ALTER TABLE {s}.{parent} ATTACH PARTITION {s}.{leaf} FOR VALUES IN ({p})",
                    schema,
                    parent=sql.Identifier(names.dataset),
                    leaf=sql.Identifier(names.leaf),
                    p=p,
                )
            )
        else:
            out.append(
                schema_sql(
                    "ALTER TABLE {s}.{t} ATTACH PARTITION {s}.{parent} FOR VALUES IN ({d})",
                    schema,
                    t=sql.Identifier(table),
                    parent=sql.Identifier(names.dataset),
                    d=d,
                )
            )
    for table, column, referenced, on_delete in FOREIGN_KEYS:
        pairs = [(tables[table].leaf, tables[referenced].leaf)]
        if not dataset_placed:
            pairs.append((tables[table].rest, tables[referenced].rest))
        for child, target in pairs:
            out.append(
                schema_sql(
                    "ALTER TABLE {s}.{child} ADD FOREIGN KEY (dataset, project, {c})"
                    " REFERENCES {s}.{target} (dataset, project, id)" + on_delete,
                    schema,
                    child=sql.Identifier(child),
                    target=sql.Identifier(target),
                    c=sql.Identifier(column),
                )
            )
    out.append(schema_sql("INSERT INTO {s}.tenant_partitions (dataset, project) VALUES ({d}, {p})", schema, d=d, p=p))
    return out
