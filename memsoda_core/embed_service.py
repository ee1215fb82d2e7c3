"""The embedding service that `memsoda server start` runs beside PostgreSQL: the offline model, loaded
once, answering on a Unix socket in MEMSODA_HOME, so a command line that embeds a query does not load
torch and the model itself (`ServiceEmbedder`, the client).

The protocol is one request per connection, one JSON line each way:

    request  {"texts": ["...", ...]}     an empty list asks only which model is served
    reply    {"model": "...", "dimensions": 384, "count": 2, "vectors": "<base64>"}
             or {"error": "..."}

`vectors` is the float32 little-endian matrix (count x dimensions, row-major) in base64: the same
numbers an in-process `LocalEmbedder` returns. Every failure on the client side is an `EmbeddingError`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import os
import socket
import socketserver
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memsoda_core.embedders.protocol import Embedder
from memsoda_core.errors import EmbeddingError

logger = logging.getLogger(__name__)

SOCKET_NAME = "embed.sock"
"""The service's socket, in the home of the server it runs beside."""

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""A request or reply larger than this is refused (an import batch is far smaller)."""

HELLO_TIMEOUT_S = 2.0
"""How long a client waits for the service to say which model it serves (else it loads its own)."""

EMBED_TIMEOUT_S = 300.0
"""How long a client waits for vectors (a large import batch on a busy machine)."""

_UNIX_PATH_MAX = 107


@dataclass(frozen=True, kw_only=True)
class EmbedRequest:
    texts: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class EmbedReply:
    model: str
    dimensions: int
    vectors: list[list[float]]


def socket_path(home: Path) -> Path:
    return home / SOCKET_NAME


def encode_request(request: EmbedRequest) -> bytes:
    return json.dumps({"texts": list(request.texts)}).encode("utf-8") + b"\n"


def decode_request(line: bytes) -> EmbedRequest:
    """A request line -> EmbedRequest; ValueError saying what is wrong."""
    body = json.loads(line)
    texts = body.get("texts") if isinstance(body, dict) else None
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise ValueError('a request is {"texts": [str, ...]}')
    return EmbedRequest(texts=tuple(texts))


def encode_reply(reply: EmbedReply) -> bytes:
    matrix = np.asarray(reply.vectors, dtype="<f4").reshape(len(reply.vectors), reply.dimensions)
    body = {
        "model": reply.model,
        "dimensions": reply.dimensions,
        "count": len(reply.vectors),
        "vectors": base64.b64encode(matrix.tobytes()).decode("ascii"),
    }
    return json.dumps(body).encode("utf-8") + b"\n"


def encode_error(message: str) -> bytes:
    return json.dumps({"error": message}).encode("utf-8") + b"\n"


def decode_reply(line: bytes) -> EmbedReply:
    """A reply line -> EmbedReply; EmbeddingError for an error reply or a malformed one."""
    try:
        body = json.loads(line)
    except ValueError:
        raise EmbeddingError("the embedding service sent a reply that is not JSON") from None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        raise EmbeddingError(f"the embedding service failed: {body['error']}")
    if not isinstance(body, dict):
        raise EmbeddingError("the embedding service sent a malformed reply")
    model, dimensions, count, packed = (body.get(key) for key in ("model", "dimensions", "count", "vectors"))
    if (
        not isinstance(model, str)
        or not isinstance(dimensions, int)
        or not isinstance(count, int)
        or not isinstance(packed, str)
        or dimensions < 1
        or count < 0
    ):
        raise EmbeddingError("the embedding service sent a malformed reply")
    try:
        raw = base64.b64decode(packed, validate=True)
    except (binascii.Error, ValueError):
        raise EmbeddingError("the embedding service sent vectors that are not base64") from None
    if len(raw) != 4 * count * dimensions:
        raise EmbeddingError(f"the embedding service sent {len(raw)} bytes for {count} vectors of {dimensions}")
    matrix = np.frombuffer(raw, dtype="<f4").reshape(count, dimensions)
    return EmbedReply(model=model, dimensions=dimensions, vectors=[row.tolist() for row in matrix])


def _read_line(stream: Any) -> bytes:
    line: bytes = stream.readline(MAX_MESSAGE_BYTES + 1)
    if len(line) > MAX_MESSAGE_BYTES:
        raise ValueError(f"a message over {MAX_MESSAGE_BYTES} bytes")
    if not line.endswith(b"\n"):
        raise ValueError("the connection closed before a whole line")
    return line


# --- the service ----------------------------------------------------------------------------------


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    embedder: Embedder
    lock: threading.Lock


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        try:
            request = decode_request(_read_line(self.rfile))
        except ValueError as exc:
            self.wfile.write(encode_error(f"bad request: {exc}"))
            return
        embedder = self.server.embedder
        try:
            with self.server.lock:  # one encode at a time: torch already uses every core
                vectors = embedder.embed_documents(list(request.texts)) if request.texts else []
            reply = EmbedReply(model=str(embedder.model), dimensions=int(embedder.dimensions), vectors=vectors)
            self.wfile.write(encode_reply(reply))
        except Exception as exc:  # the client gets the failure as an EmbeddingError
            logger.warning("embedding failed: %s: %s", type(exc).__name__, exc)
            self.wfile.write(encode_error(f"{type(exc).__name__}: {exc}"))


class EmbedService:
    """`embedder` served on the socket in `home` until `close()`; the socket is only there once
    the model has answered a first request, so a client that finds it never waits for a load."""

    def __init__(self, home: Path, embedder: Embedder) -> None:
        self._path = socket_path(home)
        self._embedder = embedder
        self._server: _Server | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="memsoda-embed-service", daemon=True)

    def start(self) -> EmbedService:
        self._thread.start()
        return self

    def _run(self) -> None:
        if len(str(self._path)) > _UNIX_PATH_MAX:
            logger.warning("no embedding service: the socket path %s is too long for a Unix socket", self._path)
            return
        try:
            self._embedder.embed_documents(["warm up"])  # load the model before the socket appears
        except Exception:
            logger.exception("no embedding service: the model did not load")
            return
        with self._lock:  # close() either sees no server, or one whose serve_forever will run
            if self._closed:
                return
            self._path.unlink(missing_ok=True)
            server = _Server(str(self._path), _Handler, bind_and_activate=False)
            server.embedder, server.lock = self._embedder, threading.Lock()
            old_umask = os.umask(0o177)  # the socket is the owner's alone
            try:
                server.server_bind()
            finally:
                os.umask(old_umask)
            server.server_activate()
            self._server = server
        logger.info("embedding service for %s on %s", self._embedder.model, self._path)
        server.serve_forever(poll_interval=0.5)

    def close(self) -> None:
        """Stop answering and remove the socket."""
        with self._lock:
            self._closed = True
            server = self._server
        if server is not None:
            server.shutdown()
            server.server_close()
            self._path.unlink(missing_ok=True)


# --- the client -----------------------------------------------------------------------------------


def _exchange(path: Path, request: EmbedRequest, timeout_s: float) -> EmbedReply:
    """One request to the service at `path`; EmbeddingError for any failure."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout_s)
            conn.connect(str(path))
            conn.sendall(encode_request(request))
            with conn.makefile("rb") as stream:
                line = _read_line(stream)
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"the embedding service at {path} failed: {type(exc).__name__}: {exc}") from exc
    return decode_reply(line)


def hello(home: Path, timeout_s: float = HELLO_TIMEOUT_S) -> EmbedReply | None:
    """The model the service in `home` serves (no vectors), or None when none answers."""
    path = socket_path(home)
    if len(str(path)) > _UNIX_PATH_MAX or not path.exists():
        return None
    try:
        return _exchange(path, EmbedRequest(texts=()), timeout_s)
    except EmbeddingError as exc:
        logger.debug("no embedding service in %s: %s", home, exc)
        return None


class ServiceEmbedder:
    """An Embedder that asks the service in a home for its vectors (`connect` builds one)."""

    def __init__(self, path: Path, model: str, dimensions: int, *, timeout_s: float = EMBED_TIMEOUT_S) -> None:
        self._path = path
        self._model = model
        self._dimensions = dimensions
        self._timeout_s = timeout_s

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        reply = _exchange(self._path, EmbedRequest(texts=tuple(texts)), self._timeout_s)
        if reply.model != self._model or reply.dimensions != self._dimensions:
            raise EmbeddingError(
                f"the embedding service now serves {reply.model!r} ({reply.dimensions} dimensions), "
                f"not {self._model!r} ({self._dimensions})"
            )
        return reply.vectors

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        return await asyncio.to_thread(self.embed_query, text)


def connect(home: Path, model: str) -> ServiceEmbedder | None:
    """A client of the service in `home` when it is up and serves `model`, else None."""
    served = hello(home)
    if served is None or served.model != model:
        return None
    return ServiceEmbedder(socket_path(home), served.model, served.dimensions)
