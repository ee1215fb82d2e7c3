"""Shared test data, and test embedders that wrap the real offline model: they count calls or
fail on purpose."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import psycopg

from memsoda_core import LocalEmbedder
from memsoda_core.runner.compiled import Compiled


def generic_plan(conn: psycopg.Connection[Any], statement: Compiled) -> dict[str, Any]:
    """PostgreSQL's generic plan of a compiled recall statement (its `$n` text), as recall runs an
    indexed scope's statements, and as a shared statement's plan may end up."""
    explain = b"EXPLAIN (GENERIC_PLAN, FORMAT JSON) " + statement.query  # no values: its $n stay unknown
    ((explained,),) = psycopg.RawCursor(conn).execute(explain).fetchall()
    return dict(explained[0]["Plan"])


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan, depth first."""
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


class CountingEmbedder:
    """The real model, counting how often each method is called and keeping the documents' texts."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner
        self.query_calls = 0
        self.document_calls = 0
        self.documents: list[str] = []

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls += 1
        self.documents += texts
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self.query_calls += 1
        return self.inner.embed_query(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls += 1
        self.documents += texts
        return self.inner.embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        self.query_calls += 1
        return self.inner.embed_query(text)


class FaultyEmbedder(CountingEmbedder):
    """The real model, broken on demand: `mode` is None (healthy), "raise", "slow", "nan",
    "wrong_dim", or "short" (one vector fewer than texts)."""

    def __init__(self, inner: LocalEmbedder, mode: str | None = None, delay_s: float = 2.0) -> None:
        super().__init__(inner)
        self.mode = mode
        self.delay_s = delay_s

    def _spoil(self, vectors: list[list[float]]) -> list[list[float]]:
        if self.mode == "raise":
            raise RuntimeError("embedding service exploded")
        if self.mode == "nan":
            return [[float("nan")] * len(v) for v in vectors]
        if self.mode == "wrong_dim":
            return [v[:-1] for v in vectors]
        if self.mode == "short":
            return vectors[:-1]
        return vectors

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.mode == "slow":
            time.sleep(self.delay_s)
        return self._spoil(super().embed_documents(texts))

    def embed_query(self, text: str) -> list[float]:
        if self.mode == "slow":
            time.sleep(self.delay_s)
        return self._spoil([super().embed_query(text)])[0] if self.mode != "short" else []

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.mode == "slow":
            await asyncio.sleep(self.delay_s)
        return self._spoil(await super().aembed_documents(texts))

    async def aembed_query(self, text: str) -> list[float]:
        if self.mode == "slow":
            await asyncio.sleep(self.delay_s)
        return self._spoil([await super().aembed_query(text)])[0] if self.mode != "short" else []


class OtherModel(CountingEmbedder):
    """The real model under another name and/or dimension, to test the store's model check."""

    def __init__(self, inner: LocalEmbedder, *, model: str | None = None, dimensions: int | None = None) -> None:
        super().__init__(inner)
        self._model = model
        self._dimensions = dimensions

    @property
    def model(self) -> str:
        return self._model or self.inner.model

    @property
    def dimensions(self) -> int:
        return self._dimensions or self.inner.dimensions


ADAPTER_FACTS: list[dict[str, Any]] = [
    {"subject": "user", "predicate": "drives", "object": "honda civic", "object_type": "PRODUCT"},
    {"subject": "honda civic", "predicate": "has color", "object": "blue", "object_type": "LITERAL"},
    {"subject": "user", "predicate": "lives in", "object": "lisbon", "object_type": "LOCATION"},
    {"subject": "user", "predicate": "works at", "object": "acme corp", "object_type": "ORG"},
    {"subject": "user", "predicate": "has sister", "object": "ana", "object_type": "PERSON"},
    {"subject": "ana", "predicate": "lives in", "object": "porto", "object_type": "LOCATION"},
    {"subject": "user", "predicate": "prefers", "object": "green tea", "object_type": "LITERAL"},
]
"""The small memory both adapter test modules recall from."""
ADAPTER_QUERY = "what car does the user drive?"


def run_compiled(
    conn: psycopg.Connection[Any], statement: Compiled, params: dict[str, Any], *, before: bytes = b""
) -> list[Any]:
    """The rows of a compiled statement run as the runner runs it (a raw cursor), `before` put in
    front of its text (an EXPLAIN)."""
    return psycopg.RawCursor(conn).execute(before + statement.query, statement.bind(params)).fetchall()
