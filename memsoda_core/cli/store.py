"""Opening the store for a command, without loading an embedding model when the command never embeds."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from memsoda_core.cli.common import EMBEDDER_OPTION, Settings, command_embedder, store_target
from memsoda_core.cli.output import spinner
from memsoda_core.embedders import Embedder
from memsoda_core.embedders.choice import RecordedSpace, choose, known_dimensions
from memsoda_core.errors import EmbeddingError
from memsoda_core.memory import Memory
from memsoda_core.ops.opening import recorded_space
from memsoda_core.runner.once import run_once
from memsoda_core.runner.target import check_schema_name, release_target
from memsoda_core.store.schema import meta_exists_statement, read_meta_statement

_NOT_EMBEDDING = "this command does not embed text"


def read_meta(conn: psycopg.Connection[Any], schema: str) -> dict[str, str] | None:
    """The store's meta table, or None when memsoda has not created it yet."""
    (exists,) = conn.execute(meta_exists_statement(), {"schema": schema}).fetchone() or (False,)
    if not exists:
        return None
    return {str(k): str(v) for k, v in conn.execute(read_meta_statement(schema)).fetchall()}


class StoredSpace:
    """Stands in for the embedder in commands that never embed (stats, export, forget), so they
    do not load a model: it reports the model and dimension the store already holds."""

    def __init__(self, model: str, dimensions: int) -> None:
        self._model = model
        self._dimensions = dimensions

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise EmbeddingError(_NOT_EMBEDDING)

    def embed_query(self, text: str) -> list[float]:
        raise EmbeddingError(_NOT_EMBEDDING)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        raise EmbeddingError(_NOT_EMBEDDING)

    async def aembed_query(self, text: str) -> list[float]:
        raise EmbeddingError(_NOT_EMBEDDING)


def _space(settings: Settings, recorded: RecordedSpace | None) -> Embedder:
    """The embedder of a command that never embeds: the store's space, or the space a new store
    would take when its size is known without a model, else the real embedder."""
    if recorded is not None:
        return StoredSpace(recorded.model, recorded.dimensions)
    spec = choose(None, option=(EMBEDDER_OPTION, settings.embedder) if settings.embedder else None).spec
    dimensions = known_dimensions(spec) if spec is not None else None
    if spec is None or dimensions is None:
        return command_embedder(settings, None)
    return StoredSpace(spec.model, dimensions)


@contextmanager
def open_memory(settings: Settings, *, embeds: bool = True) -> Iterator[Memory]:
    """A Memory on the chosen store; `embeds=False` opens it without loading an embedding model."""
    with spinner("opening the store"):
        target = store_target(settings)
        try:
            recorded = run_once(target.dsn, recorded_space(check_schema_name(settings.schema)))
            embedder = command_embedder(settings, recorded) if embeds else _space(settings, recorded)
            memory = Memory.open(target.dsn, embedder, schema=settings.schema)
        except BaseException:
            release_target(target)
            raise
    try:
        yield memory
    finally:
        memory.close()
        release_target(target)
