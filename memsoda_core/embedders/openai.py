"""An embedder for any OpenAI-compatible embeddings endpoint: OpenAI, Azure, Ollama, vLLM, ..."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from memsoda_core.checks import CONFIGURATION, check_int, check_number, is_int
from memsoda_core.errors import ConfigurationError, EmbeddingError

logger = logging.getLogger(__name__)

KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
"""Vector sizes of OpenAI's embedding models, so opening a store needs no request."""

_PROBE_TEXT = "dimension probe"


def openai_clients(
    user: str, model: str, *, base_url: str | None, api_key: str | None, timeout: float, max_retries: int
) -> tuple[Any, Any]:
    """Checked settings -> a sync and an async `openai` client sharing them (also used by
    `OpenAISynthesizer`). `user` names the caller in error messages."""
    try:
        import openai
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(f"{user} needs the openai package: pip install 'memsoda[openai]'") from exc
    if not isinstance(model, str) or not model:
        raise ConfigurationError("model must be a non-empty model name")
    check_number(timeout, "timeout", positive=True, finite=False, unit="seconds", errors=CONFIGURATION)
    check_int(max_retries, "max_retries", low=0, errors=CONFIGURATION)
    key = api_key or os.environ.get("OPENAI_API_KEY") or ("not-needed" if base_url else None)
    if key is None:
        raise ConfigurationError(f"{user} needs api_key= or OPENAI_API_KEY (or a base_url for a local server)")
    options: dict[str, Any] = {"api_key": key, "base_url": base_url, "timeout": timeout, "max_retries": max_retries}
    return openai.OpenAI(**options), openai.AsyncOpenAI(**options)


class OpenAIEmbedder:
    """Embeddings over the OpenAI protocol with the `openai` package (sync and async clients).

    `dimensions` is sent to the API when given (text-embedding-3 models can shorten vectors);
    otherwise it is the model's known size, or found by embedding one probe text on first use.
    Requests are split into `batch_size` inputs; `timeout` and `max_retries` go to the client
    (which retries connection errors, timeouts, 408, 409, 429 and 5xx with backoff). Every failure,
    including a malformed response, raises `EmbeddingError`.
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        dimensions: int | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        batch_size: int = 256,
        send_dimensions: bool | None = None,
    ) -> None:
        check_int(batch_size, "batch_size", low=1, errors=CONFIGURATION)
        check_int(dimensions, "dimensions", low=1, or_none=True, errors=CONFIGURATION)
        self._client, self._aclient = openai_clients(
            "OpenAIEmbedder", model, base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )
        self._model = model
        self._dimensions = dimensions or KNOWN_DIMENSIONS.get(model)
        self._send_dimensions = dimensions is not None if send_dimensions is None else send_dimensions
        self._batch_size = batch_size
        self._probe_lock = threading.Lock()

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimensions(self) -> int:
        """The vector size; for a model of unknown size, one probe request finds it (once)."""
        if self._dimensions is None:
            with self._probe_lock:
                if self._dimensions is None:
                    probed = len(self.embed_query(_PROBE_TEXT))
                    if probed == 0:
                        raise EmbeddingError(f"{self._model} returned an empty vector for the dimension probe")
                    logger.debug("probed %s: %d dimensions", self._model, probed)
                    self._dimensions = probed
        return self._dimensions

    def _request(self, batch: list[str]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self._model, "input": batch, "encoding_format": "float"}
        if self._send_dimensions and self._dimensions is not None:
            request["dimensions"] = self._dimensions
        return request

    def _vectors(self, response: Any, count: int) -> list[list[float]]:
        """The response's vectors in input order (by each item's `index`), or EmbeddingError."""
        data = getattr(response, "data", None)
        if not isinstance(data, Sequence) or isinstance(data, str | bytes):
            raise EmbeddingError(
                f"{self._model} returned a malformed response ({type(response).__name__} without a data list)"
            )
        if len(data) != count:
            raise EmbeddingError(f"{self._model} returned {len(data)} embeddings for {count} inputs")
        by_index: dict[int, list[float]] = {}
        for position, item in enumerate(data):
            index = getattr(item, "index", position)
            if not is_int(index) or not 0 <= index < count or index in by_index:
                raise EmbeddingError(f"{self._model} returned an embedding with a bad or repeated index {index!r}")
            embedding = getattr(item, "embedding", None)
            if not isinstance(embedding, Sequence) or isinstance(embedding, str | bytes):
                raise EmbeddingError(f"{self._model} returned an embedding that is not a list of numbers")
            try:
                by_index[index] = [float(x) for x in embedding]
            except (TypeError, ValueError):
                raise EmbeddingError(f"{self._model} returned an embedding with non-numeric values") from None
        return [by_index[i] for i in range(count)]

    def _failure(self, exc: Exception) -> EmbeddingError:
        return EmbeddingError(
            f"embedding request to {self._model} at {self._client.base_url} failed: {type(exc).__name__}: {exc}"
        )

    def _batches(self, texts: list[str]) -> list[list[str]]:
        return [texts[i : i + self._batch_size] for i in range(0, len(texts), self._batch_size)]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for batch in self._batches(list(texts)):
            try:
                response = self._client.embeddings.create(**self._request(batch))
            except Exception as exc:  # API errors and unparseable bodies alike
                raise self._failure(exc) from exc
            vectors.extend(self._vectors(response, len(batch)))
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for batch in self._batches(list(texts)):
            try:
                response = await self._aclient.embeddings.create(**self._request(batch))
            except Exception as exc:  # API errors and unparseable bodies alike
                raise self._failure(exc) from exc
            vectors.extend(self._vectors(response, len(batch)))
        return vectors

    async def aembed_query(self, text: str) -> list[float]:
        return (await self.aembed_documents([text]))[0]

    def close(self) -> None:
        """Close the sync client's connections (the async client is closed by `aclose`)."""
        self._client.close()

    async def aclose(self) -> None:
        """Close both clients' connections."""
        self._client.close()
        await self._aclient.close()
