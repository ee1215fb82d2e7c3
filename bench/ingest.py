"""`python -m bench ingest`: write throughput into an indexed store.

- `Memory.add_facts` with the store's embedder in the loop (the local model by default);
- `Memory.add_facts(..., vectors=...)` with the facts' vectors given; entity names are still
  embedded by the store's embedder, here a stand-in that hands back ready vectors (cost ~0);
- into a tenant that has its own indexes, and into a new one (no vector index below
  `tenant_index_min_facts`);
- `Memory.import_jsonl`, the bulk path of the public API (rows first, tenant indexes built once);
- binary COPY into memsoda's tables with the secondary indexes dropped, then the indexes rebuilt
  (`synth.load`) and the tenant indexes built (`Memory.maintain`).
"""

from __future__ import annotations

import asyncio
import io
import json
import random
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench import synth
from bench.common import bench_memory, connect, environment, markdown_table
from memsoda_core import Memory
from memsoda_core.embedders import Embedder


class GivenVectors:
    """Hands back vectors from a ready pool (cycling): the write path without a model."""

    def __init__(self, model: str, dims: int, seed: int = 1) -> None:
        self._model = model
        self._dims = dims
        rng = np.random.default_rng(seed)
        pool = rng.standard_normal((4096, dims)).astype(np.float32)
        self._pool = (pool / np.linalg.norm(pool, axis=1, keepdims=True)).tolist()
        self._next = 0

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimensions(self) -> int:
        return self._dims

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        out = []
        for _ in texts:
            out.append(self._pool[self._next % len(self._pool)])
            self._next += 1
        return out

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        await asyncio.sleep(0)
        return self.embed_query(text)


def fact_dicts(data: synth.TenantData) -> list[dict[str, Any]]:
    """The synthetic tenant's facts as `add_facts` input."""
    out = []
    for subject, predicate, obj_text, obj_idx, mention, _, valid_at, invalid_at, confidence in data.facts:
        out.append(
            {
                "subject": data.entity_names[subject],
                "predicate": predicate,
                "object": obj_text,
                "object_type": "LITERAL" if obj_idx is None else data.entity_types[obj_idx],
                "mentions": [] if mention is None else [data.entity_names[mention]],
                "valid_at": valid_at,
                "invalid_at": invalid_at,
                "confidence": confidence,
            }
        )
    return out


def _add(
    memory: Memory,
    facts: Sequence[dict[str, Any]],
    project: str,
    batch: int,
    vectors: np.ndarray | None = None,
    dataset: str = "ingest",
) -> float:
    """Seconds to write `facts` in batches; the preloaded tenants are in `synth.DATASET`."""
    started = time.perf_counter()
    for start in range(0, len(facts), batch):
        given = None if vectors is None else vectors[start : start + batch]
        memory.add_facts(list(facts[start : start + batch]), dataset=dataset, project=project, vectors=given)
    return time.perf_counter() - started


def _unit_vectors(count: int, dims: int, seed: int) -> np.ndarray:
    values = np.random.default_rng(seed).standard_normal((count, dims)).astype(np.float32)
    units: np.ndarray = values / np.linalg.norm(values, axis=1, keepdims=True)
    return units


def _jsonl(facts: Sequence[dict[str, Any]]) -> io.StringIO:
    lines = [json.dumps({**f, "valid_at": _iso(f["valid_at"]), "invalid_at": _iso(f["invalid_at"])}) for f in facts]
    return io.StringIO("\n".join(lines) + "\n")


def _iso(value: Any) -> Any:
    return value.isoformat() if value is not None else None


def run(
    *,
    embedder: Embedder,
    base: int = 20_000,
    large: int = 20_000,
    embedded: int = 1_000,
    given: int = 10_000,
    batches: Sequence[int] = (100, 500),
    seed: int = 11,
) -> str:
    """The ingest benchmark; returns markdown."""
    dims = int(embedder.dimensions)
    words = synth.vocabulary(3000, random.Random(seed))
    rows: list[list[Any]] = []
    with bench_memory(embedder) as memory:
        tenants = [
            synth.generate(synth.Tenant(project=f"base{i:03d}", facts=1000), dims=dims, words=words, seed=seed + i)
            for i in range(max(1, base // 1000))
        ]
        for project in ("indexed", "import-kept", "import-rebuilt"):
            tenants.append(
                synth.generate(synth.Tenant(project=project, facts=large), dims=dims, words=words, seed=seed)
            )
        with connect(memory.dsn) as conn:
            report = synth.load(conn, memory.info.schema, tenants)
        started = time.perf_counter()
        built = memory.maintain().indexes
        tenant_s = time.perf_counter() - started
        rows.append(
            [
                "bulk: binary COPY, secondary indexes dropped",
                f"{report.facts:,}",
                "-",
                f"{report.copy_rate:,.0f}",
                f"then {report.index_s:.1f} s to rebuild the shared b-trees and ANALYZE, "
                f"{tenant_s:.1f} s for {len(built)} tenant indexes of the three {large:,}-fact tenants",
            ]
        )
        rows.append(
            [
                "bulk: COPY + every index built, end to end",
                f"{report.facts:,}",
                "-",
                f"{report.facts / (report.copy_s + report.index_s + tenant_s):,.0f}",
                "b-trees, the large tenants' HNSW (facts, entities) and GIN, ANALYZE",
            ]
        )
        sample = fact_dicts(
            synth.generate(
                synth.Tenant(project="x", facts=max(embedded, given)), dims=dims, words=words, seed=seed + 999
            )
        )
        texts = [f"{f['subject']} {f['predicate']} {f['object']}" for f in sample[:embedded]]
        started = time.perf_counter()
        embedder.embed_documents(texts)
        embed_s = time.perf_counter() - started
        seconds = _add(memory, sample[:embedded], "with-model", 250)
        rows.append(
            [
                f"add_facts, {embedder.model} in the loop",
                f"{embedded:,}",
                "250",
                f"{embedded / seconds:,.0f}",
                f"new tenant; embedding the texts alone: {embedded / embed_s:,.0f} texts/s",
            ]
        )
        threshold = memory.info.tenant_index_min_facts
        with Memory.open(memory.dsn, GivenVectors(memory.info.model, dims), schema=memory.info.schema) as fast:
            small = min(given, threshold - 1)
            paths = (
                ("an indexed tenant", given, "indexed",
                 f"tenant of {large:,}+ facts: its HNSW (facts, entities) and GIN maintained per row"),
                ("a small tenant", small, "small-{batch}",
                 f"under {threshold:,} facts: searched exactly, no vector index to maintain"),
                ("a new tenant", given, "new-{batch}",
                 f"no vector index until {threshold:,} facts; the write that crosses it builds them"),
            )  # fmt: skip
            vectors = _unit_vectors(given, dims, seed)
            for target, count, project, note in paths:  # project: the tenant written, per batch size
                for batch in batches:
                    dataset = synth.DATASET if project == "indexed" else "ingest"  # "indexed" is preloaded
                    seconds = _add(fast, sample[:count], project.format(batch=batch), batch, vectors[:count], dataset)
                    rows.append(
                        [
                            f"add_facts, vectors given, into {target}",
                            f"{count:,}",
                            str(batch),
                            f"{count / seconds:,.0f}",
                            note,
                        ]
                    )
            imports = (
                ("a new tenant", "imported", None,
                 "one transaction, validated first; tenant indexes built once at the end"),
                ("an indexed tenant, index kept", "import-kept", False,
                 f"tenant of {large:,} facts: its fact HNSW maintained per row (rebuild_index=False)"),
                ("an indexed tenant, index rebuilt", "import-rebuilt", None,
                 f"tenant of {large:,} facts: fact HNSW dropped first, built once after (the default"
                 " for an import of 1/4 of the tenant or more)"),
            )  # fmt: skip
            for target, project, rebuild, note in imports:
                source = _jsonl(sample[:given])
                started = time.perf_counter()
                dataset = "ingest" if project == "imported" else synth.DATASET  # the others are preloaded
                fast.import_jsonl(source, dataset=dataset, project=project, rebuild_index=rebuild)
                seconds = time.perf_counter() - started
                rows.append(
                    [
                        f"import_jsonl, stand-in embedder, into {target}",
                        f"{given:,}",
                        "500",
                        f"{given / seconds:,.0f}",
                        note,
                    ]
                )
        header = f"Run: {environment(memory.dsn)}.\n\nStore preloaded with {report.facts:,} facts.\n"
    return header + "\n" + markdown_table(["path", "facts", "batch", "facts/s", "notes"], rows) + "\n"
