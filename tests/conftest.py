"""Shared fixtures: a real PostgreSQL + pgvector (the embedded server, in a temporary data directory
removed at the end; or `MEMSODA_TEST_DSN`), the real offline embedder, and memories parametrized
over `Memory` and `AsyncMemory`. Tests are isolated by unique (dataset, project) scopes."""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from memsoda_core import AsyncMemory, Embedder, LocalEmbedder, Memory, ScopeArgs
from memsoda_core import server as embedded

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A DSN of a real PostgreSQL with pgvector for the whole session."""
    configured = os.environ.get("MEMSODA_TEST_DSN")
    if configured:
        yield configured
        return
    home = Path(tempfile.mkdtemp(prefix="memsoda-test-"))
    pgdata, uri = embedded.acquire(home)
    try:
        yield uri
    finally:
        embedded.release(pgdata)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    """The offline all-MiniLM-L6-v2 model, loaded once."""
    model = LocalEmbedder()
    model.embed_query("warm up")
    return model


@pytest.fixture
def scope() -> ScopeArgs:
    """A fresh (dataset, project) no other test uses."""
    return {"dataset": f"ds-{uuid.uuid4().hex[:10]}", "project": "proj"}


class Either:
    """Calls a Memory or an AsyncMemory the same way: `await mem.recall(...)` works for both."""

    def __init__(self, memory: Memory | AsyncMemory) -> None:
        self.raw = memory
        self.is_async = isinstance(memory, AsyncMemory)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.raw, name)
        if not callable(attribute):
            return attribute

        async def call(*args: Any, **kwargs: Any) -> Any:
            result = attribute(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        return call


async def open_memory(flavour: str, dsn: str | None, embedder: Embedder | None, **kwargs: Any) -> Either:
    """A Memory ("sync") or an AsyncMemory ("async") opened with `kwargs`, behind `Either`."""
    if flavour == "sync":
        return Either(Memory.open(dsn, embedder, **kwargs))
    return Either(await AsyncMemory.open(dsn, embedder, **kwargs))


@pytest.fixture(params=["sync", "async"])
async def memory(request: pytest.FixtureRequest, pg_dsn: str, embedder: LocalEmbedder) -> AsyncIterator[Either]:
    """A Memory and an AsyncMemory on the test server (each test runs once with each)."""
    if request.param == "sync":
        sync_memory = Memory.open(pg_dsn, embedder)
        try:
            yield Either(sync_memory)
        finally:
            sync_memory.close()
    else:
        async_memory = await AsyncMemory.open(pg_dsn, embedder)
        try:
            yield Either(async_memory)
        finally:
            await async_memory.close()


@pytest.fixture
def sync_memory(pg_dsn: str, embedder: LocalEmbedder) -> Iterator[Memory]:
    """A plain synchronous Memory on the test server."""
    with Memory.open(pg_dsn, embedder) as opened:
        yield opened
