"""The embedder as the runners call it: checked, timed out, cached for queries."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from memsoda_core.embedders import Embedder, default_embedder
from memsoda_core.embedders.protocol import Vector
from memsoda_core.errors import (
    ConfigurationError,
    EmbeddingError,
)

T = TypeVar("T")

logger = logging.getLogger(__name__)


class EmbeddingCache:
    """A bounded LRU of query embeddings: identical query texts are embedded once."""

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._items: OrderedDict[str, Vector] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text: str) -> Vector | None:
        with self._lock:
            vector = self._items.get(text)
            if vector is not None:
                self._items.move_to_end(text)
            return vector

    def put(self, text: str, vector: Vector) -> None:
        if self._size <= 0:
            return
        with self._lock:
            self._items[text] = vector
            self._items.move_to_end(text)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


def check_embedder(embedder: Embedder | None) -> Embedder:
    chosen = embedder if embedder is not None else default_embedder()
    for attribute in (
        "embed_documents",
        "embed_query",
        "aembed_documents",
        "aembed_query",
        "model",
        "dimensions",
    ):
        if not hasattr(chosen, attribute):
            raise ConfigurationError(
                f"embedder {type(chosen).__name__} lacks {attribute!r}; wrap LangChain or LlamaIndex models with "
                "memsoda_langchain.LangChainEmbedder / memsoda_llamaindex.LlamaIndexEmbedder"
            )
    return chosen


def call_with_timeout(function: Callable[[str], list[float]], argument: str, timeout_s: float) -> list[float]:
    """Run a blocking embedder call on its own daemon thread and wait at most `timeout_s`.

    A thread per call (not a small pool) so a hung embedder can never starve later recalls:
    the abandoned thread finishes, or not, on its own while the recall degrades."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = function(argument)
        except BaseException as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=target, name="memsoda-embed", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise TimeoutError(f"the embedder timed out after {timeout_s:g}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]


def embedding_failure(exc: BaseException) -> EmbeddingError:
    if isinstance(exc, EmbeddingError):
        return exc
    if isinstance(exc, TimeoutError):
        return EmbeddingError(str(exc) or "the embedder timed out")
    return EmbeddingError(f"the embedder failed: {type(exc).__name__}: {exc}")
