"""A deterministic, dependency-free embedder for smoke runs: hashed word counts, L2-normalized.
Fast and repeatable; its numbers say nothing about quality (use the local model for that)."""

from __future__ import annotations

import asyncio
import hashlib
import math
import re

_WORD = re.compile(r"[^\W_]+")


class HashEmbedder:
    """Bag of words hashed into `dimensions` buckets."""

    def __init__(self, dimensions: int = 384) -> None:
        self._dimensions = dimensions

    @property
    def model(self) -> str:
        return f"bench-hash-{self._dimensions}"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def _one(self, text: str) -> list[float]:
        vector = [0.0] * self._dimensions
        for word in _WORD.findall(text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            index = int.from_bytes(digest[:4], "little") % self._dimensions
            vector[index] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        if norm == 1.0 and not any(vector):
            vector[0] = 1.0
        return [v / norm for v in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        return await asyncio.to_thread(self.embed_query, text)
