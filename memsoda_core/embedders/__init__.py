"""Embedders: the protocol, the offline local model, an OpenAI-compatible client, and the rule that
picks one (`choice`: explicit, `MEMSODA_EMBEDDER`, the store's model, the environment's default)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memsoda_core.embedders.choice import build, environment_default
from memsoda_core.embedders.local import LocalEmbedder
from memsoda_core.embedders.protocol import Embedder, check_vectors

if TYPE_CHECKING:  # for type checkers; at run time `__getattr__` imports it on first use
    from memsoda_core.embedders.openai import OpenAIEmbedder

__all__ = ["Embedder", "LocalEmbedder", "OpenAIEmbedder", "check_vectors", "default_embedder"]


def default_embedder() -> Embedder:
    """The embedder a new store takes: the one `MEMSODA_EMBEDDER` names (`local`, `openai`,
    `openai:MODEL`), else OpenAI when `OPENAI_API_KEY` or `OPENAI_BASE_URL` is set (model from
    `MEMSODA_OPENAI_MODEL`, default text-embedding-3-small), else the offline all-MiniLM-L6-v2.
    `Memory.open()` without an embedder uses it only for a new store; an existing one is opened
    with the model it records."""
    spec, _ = environment_default()
    return build(spec)


def __getattr__(name: str) -> object:
    if name == "OpenAIEmbedder":
        from memsoda_core.embedders.openai import OpenAIEmbedder

        return OpenAIEmbedder
    raise AttributeError(name)
