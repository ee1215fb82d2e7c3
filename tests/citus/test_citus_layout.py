"""Tenant layouts on Citus: a store there is plain, and `distribute` turns a partitioned store
(made before Citus was installed) back into plain tables, or refuses when tenants have moved."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg
import pytest
from psycopg import sql

from memsoda_core import ConfigurationError, LocalEmbedder, Memory
from memsoda_core.distributed import distribute
from memsoda_core.store import layout as sql_layout

if TYPE_CHECKING:
    from tools.citus import Cluster  # loaded from its file at run time (tools/ is no package)

pytestmark = pytest.mark.citus

FACTS = [
    {"subject": "Maya", "predicate": "works at", "object": "Acme", "object_type": "ORG"},
    {"subject": "Maya", "predicate": "lives in", "object": "Berlin", "object_type": "PLACE"},
]


def _partitioned_store(cluster: Cluster, embedder: LocalEmbedder, schema: str) -> list[int]:
    """A store in `schema` as one made on a server without Citus is: partitioned, with facts."""
    with Memory.open(cluster.dsn, embedder, schema=schema, layout="plain") as memory:
        ids = memory.add_facts(FACTS, dataset="ds", project="p")
    with psycopg.connect(cluster.dsn) as conn:
        for statement in sql_layout.partition_statements(schema):
            conn.execute(statement)
        conn.execute(
            sql.SQL("UPDATE {}.meta SET value = 'partitioned' WHERE key = 'layout'").format(sql.Identifier(schema))
        )
    return ids


def test_a_store_on_citus_is_plain_and_cannot_be_made_partitioned(cluster: Cluster, embedder: LocalEmbedder) -> None:
    with pytest.raises(ConfigurationError, match="not for a Citus database"):
        Memory.open(cluster.dsn, embedder, schema="layout_refused", layout="partitioned")
    with Memory.open(cluster.dsn, embedder, schema="layout_default") as memory:
        assert memory.info.layout != "partitioned"


def test_distribute_turns_a_partitioned_store_into_plain_distributed_tables(
    cluster: Cluster, embedder: LocalEmbedder
) -> None:
    ids = _partitioned_store(cluster, embedder, "was_partitioned")
    done = distribute(cluster.dsn, schema="was_partitioned")
    assert set(sql_layout.PARTITIONED) <= set(done.distributed)
    with Memory.open(cluster.dsn, embedder, schema="was_partitioned") as memory:
        assert memory.info.layout == "citus"
        assert {s.fact.id for s in memory.recall("where does Maya work?", dataset="ds", project="p").facts} == set(ids)
        (new,) = memory.add_facts(
            [{"subject": "Maya", "predicate": "likes", "object": "tea"}], dataset="ds", project="p"
        )
        assert new > max(ids)


def test_distribute_refuses_a_store_whose_tenants_have_moved(cluster: Cluster, embedder: LocalEmbedder) -> None:
    _partitioned_store(cluster, embedder, "has_moved")
    with psycopg.connect(cluster.dsn) as conn:
        conn.execute("INSERT INTO has_moved.tenant_partitions (dataset, project) VALUES ('ds', 'p')")
    with pytest.raises(ConfigurationError, match="have partitions of their own"):
        distribute(cluster.dsn, schema="has_moved")
    with psycopg.connect(cluster.dsn) as conn:  # nothing changed
        (kind,) = conn.execute("SELECT relkind FROM pg_class WHERE oid = 'has_moved.facts'::regclass").fetchone()  # type: ignore[misc]
    assert kind == "p"


def _recall_ids(memory: Memory) -> set[int]:
    return {s.fact.id for s in memory.recall("where does Maya work?", dataset="ds", project="p").facts}


@pytest.mark.parametrize("made", ["plain", "partitioned"])
def test_a_memory_open_before_distribute_switches_at_its_first_operation(
    cluster: Cluster, embedder: LocalEmbedder, made: str
) -> None:
    """A Memory opened on the one-node store goes on after `distribute` (another process) with the
    distributed forms from its first operation: the layout generation `distribute` bumps is read
    before it (a plain store's old forms would still run, slowly), or the first statement reading a
    DEFAULT partition that is gone fails and sends it to read it."""
    schema = f"open_across_{made}"
    if made == "partitioned":
        ids = _partitioned_store(cluster, embedder, schema)
    else:
        with Memory.open(cluster.dsn, embedder, schema=schema) as first:
            ids = first.add_facts(FACTS, dataset="ds", project="p")
    with Memory.open(cluster.dsn, embedder, schema=schema) as memory:
        assert _recall_ids(memory) == set(ids) and memory.info.layout != "citus"
        distribute(cluster.dsn, schema=schema)
        memory._layout_due = 0.0  # as after `generation.CHECK_EVERY_S`: distribute takes longer
        assert _recall_ids(memory) == set(ids)
        assert memory.info.layout == "citus"
        (new,) = memory.add_facts(
            [{"subject": "Maya", "predicate": "likes", "object": "tea"}], dataset="ds", project="p"
        )
        assert new in {f.id for f in memory.list_facts(dataset="ds", project="p").facts}
