"""What a LangChain or LlamaIndex user would assemble instead, on the same Postgres and the same rows.

- LangChain: `EnsembleRetriever` (RRF, c=60) over langchain-postgres' `PGVectorStore` retriever
  (HNSW, cosine, tenant as a metadata column with a b-tree) and `BM25Retriever` (rank_bm25, in
  memory, over the tenant's fact texts): the hybrid recipe of LangChain's docs.
- LlamaIndex: `QueryFusionRetriever(mode=FUSION_MODES.RECIPROCAL_RANK, num_queries=1)` over
  llama-index-vector-stores-postgres' `PGVectorStore(hybrid_search=True)`, one dense and one
  sparse (Postgres full text) retriever, tenant as an indexed metadata key.

Rows are copied into each store's own table layout with COPY (their own add paths run at a few
hundred rows per second); each store's indexes are built after the copy. Query vectors are looked
up, never computed, so every system gets the same precomputed embedding.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Json, Jsonb

from bench.synth import TenantData, fact_texts


def schemas(prefix: str) -> tuple[str, str]:
    """The LangChain and LlamaIndex schemas that go with memsoda's schema `prefix`."""
    return f"{prefix}_langchain", f"{prefix}_llamaindex"


def _secondary_indexes(conn: psycopg.Connection[Any], schema: str) -> list[tuple[str, str]]:
    rows = conn.execute(
        """SELECT i.indexname, i.indexdef FROM pg_indexes i
           WHERE i.schemaname = %s AND NOT EXISTS (
               SELECT 1 FROM pg_constraint c JOIN pg_class ic ON ic.oid = c.conindid
               JOIN pg_namespace n ON n.oid = ic.relnamespace
               WHERE n.nspname = i.schemaname AND ic.relname = i.indexname)""",
        (schema,),
    ).fetchall()
    return [(str(a), str(b)) for a, b in rows]


def _bulk(conn: psycopg.Connection[Any], schema: str, table: str, fill: Callable[[], None]) -> None:
    """Drop the schema's secondary indexes, fill the tables, rebuild the indexes, ANALYZE."""
    indexes = _secondary_indexes(conn, schema)
    for name, _ in indexes:
        conn.execute(sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(schema), sql.Identifier(name)))
    fill()
    conn.execute("SET maintenance_work_mem = '1GB'")
    for _, definition in indexes:
        conn.execute(sql.SQL(definition))  # from pg_indexes
    conn.execute("RESET maintenance_work_mem")
    conn.execute(sql.SQL("ANALYZE {}.{}").format(sql.Identifier(schema), sql.Identifier(table)))


class Lookup:
    """Query text -> precomputed vector, for both frameworks' embedding interfaces."""

    def __init__(self, vectors: dict[str, Sequence[float]], dims: int) -> None:
        self.vectors = vectors
        self.dims = dims

    def get(self, text: str) -> list[float]:
        vector = self.vectors.get(text)
        return [float(x) for x in vector] if vector is not None else [0.0] * (self.dims - 1) + [1.0]


def _sa_url(dsn: str, driver: str) -> str:
    return dsn.replace("postgresql://", f"postgresql+{driver}://", 1)


# --- LangChain ---------------------------------------------------------------------------------------


def langchain_setup(
    conn: psycopg.Connection[Any],
    dsn: str,
    tenants: Sequence[TenantData],
    measured: Sequence[str],
    lookup: Lookup,
    *,
    prefix: str,
) -> dict[str, Any]:
    """Load the rows and return project -> EnsembleRetriever for each measured tenant."""
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever
    from langchain_core.embeddings import Embeddings
    from langchain_postgres import Column, PGEngine, PGVectorStore
    from langchain_postgres.v2.indexes import HNSWIndex

    class LookupEmbeddings(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [lookup.get(t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return lookup.get(text)

    lc_schema = schemas(prefix)[0]
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(lc_schema)))
    engine = PGEngine.from_connection_string(url=_sa_url(dsn, "psycopg"))
    engine.init_vectorstore_table(
        table_name="facts",
        vector_size=lookup.dims,
        schema_name=lc_schema,
        metadata_columns=[Column("project", "TEXT")],
        overwrite_existing=True,
    )
    store = PGVectorStore.create_sync(
        engine,
        table_name="facts",
        schema_name=lc_schema,
        embedding_service=LookupEmbeddings(),
        metadata_columns=["project"],
    )
    store.apply_vector_index(HNSWIndex())
    conn.execute(sql.SQL("CREATE INDEX facts_project ON {}.facts (project)").format(sql.Identifier(lc_schema)))

    def fill() -> None:
        with conn.cursor().copy(
            sql.SQL(
                "COPY {}.facts (langchain_id, content, embedding, langchain_metadata, project)"
                " FROM STDIN (FORMAT BINARY)"
            ).format(sql.Identifier(lc_schema))
        ) as copy:
            copy.set_types(["uuid", "text", "vector", "json", "text"])
            for data in tenants:
                for (s, p, o), vector in zip(fact_texts(data), data.vectors, strict=True):
                    copy.write_row((uuid.uuid4(), f"{s} {p} {o}", vector, Json({}), data.project))

    _bulk(conn, lc_schema, "facts", fill)
    retrievers: dict[str, Any] = {"_engine": engine}
    for data in tenants:
        if data.project not in measured:
            continue
        vector = store.as_retriever(search_kwargs={"k": 8, "filter": {"project": data.project}})
        bm25 = BM25Retriever.from_texts([f"{s} {p} {o}" for s, p, o in fact_texts(data)], k=8)
        retrievers[data.project] = EnsembleRetriever(retrievers=[vector, bm25], weights=[0.5, 0.5])
    return retrievers


# --- LlamaIndex --------------------------------------------------------------------------------------


def llamaindex_setup(
    conn: psycopg.Connection[Any],
    dsn: str,
    tenants: Sequence[TenantData],
    measured: Sequence[str],
    lookup: Lookup,
    *,
    prefix: str,
) -> dict[str, Any]:
    """Load the rows and return project -> QueryFusionRetriever for each measured tenant."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.retrievers.fusion_retriever import FUSION_MODES
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores import MetadataFilter, MetadataFilters
    from llama_index.core.vector_stores.utils import node_to_metadata_dict
    from llama_index.vector_stores.postgres import PGVectorStore

    class LookupEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return lookup.get(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return lookup.get(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return lookup.get(text)

    li_schema = schemas(prefix)[1]
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(li_schema)))
    store = PGVectorStore(
        connection_string=_sa_url(dsn, "psycopg2"),
        async_connection_string=_sa_url(dsn, "asyncpg"),
        table_name="facts",
        schema_name=li_schema,
        hybrid_search=True,
        text_search_config="english",
        embed_dim=lookup.dims,
        use_jsonb=True,
        indexed_metadata_keys={("project", "text")},
        hnsw_kwargs={
            "hnsw_m": 16,
            "hnsw_ef_construction": 64,
            "hnsw_ef_search": 40,
            "hnsw_dist_method": "vector_cosine_ops",
        },
    )
    first = tenants[0]
    s0, p0, o0 = next(fact_texts(first))
    store.add(
        [
            TextNode(
                text=f"{s0} {p0} {o0}",
                metadata={"project": first.project},
                embedding=[float(x) for x in first.vectors[0]],
            )
        ]
    )

    def fill() -> None:
        with conn.cursor().copy(
            sql.SQL("COPY {}.data_facts (text, metadata_, node_id, embedding) FROM STDIN (FORMAT BINARY)").format(
                sql.Identifier(li_schema)
            )
        ) as copy:
            copy.set_types(["varchar", "jsonb", "varchar", "vector"])
            for data in tenants:
                for (s, p, o), vector in zip(fact_texts(data), data.vectors, strict=True):
                    node = TextNode(text=f"{s} {p} {o}", metadata={"project": data.project})
                    meta = node_to_metadata_dict(node, remove_text=True, flat_metadata=False)
                    copy.write_row((node.text, Jsonb(meta), node.node_id, vector))

    _bulk(conn, li_schema, "data_facts", fill)
    index = VectorStoreIndex.from_vector_store(store, embed_model=LookupEmbedding())
    retrievers: dict[str, Any] = {"_store": store}
    for project in measured:
        filters = MetadataFilters(filters=[MetadataFilter(key="project", value=project)])
        dense = index.as_retriever(similarity_top_k=8, filters=filters)
        sparse = index.as_retriever(
            vector_store_query_mode="sparse", similarity_top_k=8, sparse_top_k=8, filters=filters
        )
        retrievers[project] = QueryFusionRetriever(
            [dense, sparse],
            llm=MockLLM(),
            mode=FUSION_MODES.RECIPROCAL_RANK,
            similarity_top_k=8,
            num_queries=1,
            use_async=False,
        )
    return retrievers


def close(rivals: dict[str, Any]) -> None:
    """Dispose the frameworks' engines so no connection outlives the run."""
    engine = rivals.get("_engine")
    if engine is not None:  # langchain-postgres runs its async engine on a loop thread of its own
        engine._run_as_sync(engine.close())
    store = rivals.get("_store")
    if store is not None:
        if getattr(store, "_engine", None) is not None:
            store._engine.dispose()
        if getattr(store, "_async_engine", None) is not None:
            asyncio.run(store._async_engine.dispose())


def drop(conn: psycopg.Connection[Any], prefix: str) -> None:
    for schema in schemas(prefix):
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
