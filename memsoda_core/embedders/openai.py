"""An embedder for any OpenAI-compatible embeddings endpoint: OpenAI, Azure, Ollama, vLLM, ..."""

from __future__ import annotations

import os
from typing import Any

from ..errors import ConfigurationError, EmbeddingError

_KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


class OpenAIEmbedder:
    """Embeddings over the OpenAI protocol with the `openai` package (sync and async clients).

    `dimensions` is sent to the API when given (text-embedding-3 models can shorten vectors);
    otherwise it is the model's known size, or found by embedding one probe text on first use.
    Requests are split into `batch_size` inputs; `timeout` and `max_retries` go to the client.
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
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigurationError("OpenAIEmbedder needs the openai package: pip install 'memsoda[openai]'") from exc
        if batch_size < 1:
            raise ConfigurationError("batch_size must be at least 1")
        key = api_key or os.environ.get("OPENAI_API_KEY") or ("not-needed" if base_url else None)
        if key is None:
            raise ConfigurationError("OpenAIEmbedder needs api_key= or OPENAI_API_KEY (or a base_url for a local server)")
        options: dict[str, Any] = {"api_key": key, "base_url": base_url, "timeout": timeout, "max_retries": max_retries}
        self._client = openai.OpenAI(**options)
        self._aclient = openai.AsyncOpenAI(**options)
        self._model = model
        self._dimensions = dimensions or _KNOWN_DIMENSIONS.get(model)
        self._send_dimensions = dimensions is not None if send_dimensions is None else send_dimensions
        self._batch_size = batch_size
        self._error_types: tuple[type[BaseException], ...] = (openai.OpenAIError,)

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimensions(self) -> int:
        if self._dimensions is None:
            self._dimensions = len(self.embed_query("dimension probe"))
        return self._dimensions

    def _request(self, batch: list[str]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self._model, "input": batch, "encoding_format": "float"}
        if self._send_dimensions and self._dimensions is not None:
            request["dimensions"] = self._dimensions
        return request

    @staticmethod
    def _vectors(response: Any) -> list[list[float]]:
        return [list(item.embedding) for item in sorted(response.data, key=lambda item: item.index)]

    def _batches(self, texts: list[str]) -> list[list[str]]:
        return [texts[i : i + self._batch_size] for i in range(0, len(texts), self._batch_size)]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for batch in self._batches(list(texts)):
            try:
                response = self._client.embeddings.create(**self._request(batch))
            except self._error_types as exc:
                raise EmbeddingError(f"embedding request to {self._model} failed: {exc}") from exc
            vectors.extend(self._vectors(response))
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for batch in self._batches(list(texts)):
            try:
                response = await self._aclient.embeddings.create(**self._request(batch))
            except self._error_types as exc:
                raise EmbeddingError(f"embedding request to {self._model} failed: {exc}") from exc
            vectors.extend(self._vectors(response))
        return vectors

    async def aembed_query(self, text: str) -> list[float]:
        return (await self.aembed_documents([text]))[0]
