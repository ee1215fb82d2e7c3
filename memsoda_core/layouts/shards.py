"""Where a small scope's rows are on a Citus cluster, for reading them straight from the worker that
holds them (`layouts.citus`): its shard of each table a recall reads, the worker's address, and the
guard that makes such a read return nothing once the shards have moved. Pure.

Citus sends each task to its worker unnamed, so the worker parses and plans a small scope's recall
statement at every call; read from the shards by name on a connection of its own, the worker keeps
the plan as one node does (bench/RESULTS.md, "Where a small tenant's recall goes on Citus")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from psycopg import sql

from memsoda_core.store.layout import READ_TABLES


@dataclass(frozen=True)
class ShardPlace:
    """A scope's shard of each of `READ_TABLES` (colocated: one worker holds them all)."""

    relations: tuple[tuple[str, str], ...]
    """(table, the name of the scope's shard of it), in `READ_TABLES` order."""
    shard_ids: tuple[int, ...]
    host: str
    port: int

    def relation(self, table: str) -> str:
        return dict(self.relations)[table]


class PlacementRow(NamedTuple):
    """One placement of the scope's shard of one table (`place_statement`)."""

    table_name: str
    shard_id: int
    relation: str
    host: str
    port: int


def place_statement(schema: str) -> sql.Composed:
    """`PlacementRow`s of the shards of `READ_TABLES` holding dataset %(dataset)s, from the
    coordinator's metadata: on active primary nodes holding a synced copy of the metadata (the
    guard reads it there; a worker without it, Citus before 11 or sync turned off, is not read)."""
    return sql.SQL(
        """SELECT t.name AS table_name, s.shardid AS shard_id, n.relation[cardinality(n.relation)] AS relation,
                  d.nodename AS host, d.nodeport AS port
           FROM unnest(%(tables)s::text[]) AS t(name)
           CROSS JOIN LATERAL (SELECT format('%%I.%%I', {schema}::text, t.name)::regclass AS rel) AS r
           CROSS JOIN LATERAL (SELECT get_shard_id_for_distribution_column(r.rel, %(dataset)s::text) AS shardid) AS s
           CROSS JOIN LATERAL (SELECT parse_ident(shard_name(r.rel, s.shardid)) AS relation) AS n
           JOIN pg_dist_placement p ON p.shardid = s.shardid
           JOIN pg_dist_node d ON d.groupid = p.groupid AND d.noderole = 'primary' AND d.isactive
                AND d.hasmetadata AND d.metadatasynced"""
    ).format(schema=sql.Literal(schema))


def place_params(dataset: str) -> dict[str, object]:
    return {"tables": list(READ_TABLES), "dataset": dataset}


def place_from(rows: Sequence[PlacementRow]) -> ShardPlace | None:
    """The place the rows describe; None unless each table has one placement, all on one node (a
    replicated shard, or a store whose tables are not all distributed, is read through the
    coordinator)."""
    by_table = {row.table_name: row for row in rows}
    if len(rows) != len(READ_TABLES) or set(by_table) != set(READ_TABLES):
        return None
    if len({(row.host, row.port) for row in rows}) != 1:
        return None
    ordered = [by_table[table] for table in READ_TABLES]
    return ShardPlace(
        relations=tuple((row.table_name, row.relation) for row in ordered),
        shard_ids=tuple(row.shard_id for row in ordered),
        host=ordered[0].host,
        port=ordered[0].port,
    )


def placed_statement(place: ShardPlace) -> sql.Composed:
    """One row, `placed`: `placed_guard` alone (whether an empty read there was an answer)."""
    return sql.SQL("SELECT {} AS placed").format(placed_guard(place))


def placed_guard(place: ShardPlace) -> sql.Composed:
    """True while the worker that runs the statement holds every shard of `place` (its copy of the
    cluster's metadata, read in the statement's own snapshot): a read from shards Citus has moved
    away, and not dropped yet, returns nothing instead of stale rows."""
    return sql.SQL(
        """(SELECT count(*) FROM pg_dist_placement p
            JOIN pg_dist_local_group g ON g.groupid = p.groupid
            WHERE p.shardid = ANY({ids}::bigint[])) = {count}"""
    ).format(ids=sql.Literal(list(place.shard_ids)), count=sql.Literal(len(place.shard_ids)))
