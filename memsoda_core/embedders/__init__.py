"""Embedders: the protocol, the offline local model, an OpenAI-compatible client, and the default rule."""

from __future__ import annotations

import os

from memsoda_core.embedders.local import LocalEmbedder
from memsoda_core.embedders.protocol import Embedder, check_vectors

__all__ = ["Embedder", "LocalEmbedder", "OpenAIEmbedder", "check_vectors", "default_embedder"]


def default_embedder() -> Embedder:
    """OpenAI when `OPENAI_API_KEY` or `OPENAI_BASE_URL` is set (model from `MEMSODA_OPENAI_MODEL`,
    default text-embedding-3-small), else the offline all-MiniLM-L6-v2 model."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        from memsoda_core.embedders.openai import OpenAIEmbedder

        return OpenAIEmbedder(
            os.environ.get("MEMSODA_OPENAI_MODEL", "text-embedding-3-small"),
            base_url=os.environ.get("OPENAI_BASE_URL"),
        )
    return LocalEmbedder()


def __getattr__(name: str) -> object:
    if name == "OpenAIEmbedder":
        from memsoda_core.embedders.openai import OpenAIEmbedder

        return OpenAIEmbedder
    raise AttributeError(name)
