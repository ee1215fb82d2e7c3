"""A small OpenAI-compatible HTTP server for tests: `POST /v1/embeddings` and
`POST /v1/chat/completions` on 127.0.0.1, in a background thread, with scripted faults.
Chat replies are `chat_content`, or `chat(body)` when given; a request with `tools` gets the reply
as the arguments of a call of its first tool.

It speaks the real wire protocol, so the real `openai` client (and the embedder and synthesizer
built on it) is exercised end to end without the internet:

    with FakeOpenAI() as server:
        embedder = OpenAIEmbedder("fake-hash", base_url=server.base_url)
        server.fail(500, times=1)            # the next embeddings request gets a 500
        embedder.embed_query("hello")        # the client retries and succeeds
        assert len(server.requests("embeddings")) == 2

Vectors come from `embed` (texts, dimensions) -> vectors: by default a deterministic hashing
embedding (signed bag of words, L2-normalized), so texts sharing words are close. Pass a real
model's `embed_documents` for semantic vectors. Each request may consume one scripted `Fault`
(status, delay, garbage body, wrong dimension, NaN, fewer items, ...); `shuffle=True` returns
embedding items out of order (clients must sort by `index`). Every request is recorded with its
path, headers and JSON body.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import re
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Endpoint = Literal["embeddings", "chat"]
EmbedFunction = Callable[[list[str], int], list[list[float]]]

KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
DEFAULT_DIMENSIONS = 64
"""Vector length for models not in KNOWN_DIMENSIONS (and not given `dimensions`)."""

_PATHS: dict[str, Endpoint] = {"/v1/embeddings": "embeddings", "/v1/chat/completions": "chat"}
_WORD = re.compile(r"\w+")


def hashing_embedding(texts: list[str], dimensions: int) -> list[list[float]]:
    """Deterministic vectors: each lower-cased word adds ±1 at a position chosen by its hash."""
    vectors = []
    for text in texts:
        vector = [0.0] * dimensions
        for word in _WORD.findall(text.lower()) or [text]:
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
            slot, sign = divmod(int.from_bytes(digest, "big"), 2)
            vector[slot % dimensions] += 1.0 if sign else -1.0
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        if not any(vector):
            vector[0], norm = 1.0, 1.0
        vectors.append([x / norm for x in vector])
    return vectors


@dataclass(frozen=True, kw_only=True)
class Fault:
    """What to do to one request instead of (or on top of) answering it normally."""

    status: int | None = None
    """Answer with this HTTP error status and an OpenAI-style error body."""
    delay: float = 0.0
    """Seconds to wait before answering (use it to make clients time out)."""
    body: bytes | None = None
    """Send these bytes as a 200 body instead of the real answer (garbage, truncated JSON, ...)."""
    dimensions: int | None = None
    """Embeddings of this length instead of the requested one."""
    nan: bool = False
    """Put NaN into every embedding (serialized as a bare `NaN`, as Python's json does)."""
    drop: int = 0
    """Leave this many items off the end of `data`."""
    chat_content: str | None = None
    """Reply text for this chat request."""
    retry_after_ms: int | None = 1
    """`retry-after-ms` header on error statuses (keeps client retries fast); None: no header."""


@dataclass(frozen=True, kw_only=True)
class Recorded:
    """One request the server received."""

    endpoint: Endpoint | None
    path: str
    headers: dict[str, str]
    body: Any
    """The parsed JSON body (None if it was not JSON)."""

    @property
    def inputs(self) -> list[str]:
        """The embedding request's inputs as a list."""
        value = self.body.get("input") if isinstance(self.body, dict) else None
        return [value] if isinstance(value, str) else list(value or [])

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", [])) if isinstance(self.body, dict) else []


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    faults: dict[Endpoint, deque[Fault]] = field(default_factory=lambda: {"embeddings": deque(), "chat": deque()})
    recorded: list[Recorded] = field(default_factory=list)


class FakeOpenAI:
    """The server. Start it with `with FakeOpenAI() as server:` (or `start()` / `close()`)."""

    def __init__(
        self,
        *,
        embed: EmbedFunction = hashing_embedding,
        dimensions: dict[str, int] | None = None,
        default_dimensions: int = DEFAULT_DIMENSIONS,
        chat_content: str = "The user likes green tea.",
        chat: Callable[[dict[str, Any]], str] | None = None,
        shuffle: bool = False,
    ) -> None:
        self.embed = embed
        self.dimensions = {**KNOWN_DIMENSIONS, **(dimensions or {})}
        self.default_dimensions = default_dimensions
        self.chat_content = chat_content
        self.chat = chat
        self.shuffle = shuffle
        self._state = _State()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        handler = type("Handler", (_Handler,), {"fake": self})
        httpd = _Server(("127.0.0.1", 0), handler)
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>` (add `/v1` for an OpenAI client's base_url)."""
        assert self._httpd is not None, "start() the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    # --- scripting -----------------------------------------------------------------------------------

    def push(self, fault: Fault, *, times: int = 1, endpoint: Endpoint = "embeddings") -> None:
        """The next `times` requests to `endpoint` get `fault` (after any already queued)."""
        with self._state.lock:
            self._state.faults[endpoint].extend([fault] * times)

    def fail(self, status: int = 500, *, times: int = 1, endpoint: Endpoint = "embeddings") -> None:
        """The next `times` requests to `endpoint` answer with HTTP `status`."""
        self.push(Fault(status=status), times=times, endpoint=endpoint)

    def slow(self, seconds: float, *, times: int = 1, endpoint: Endpoint = "embeddings") -> None:
        """The next `times` requests to `endpoint` wait `seconds` before answering."""
        self.push(Fault(delay=seconds), times=times, endpoint=endpoint)

    def reset(self) -> None:
        """Forget queued faults and recorded requests."""
        with self._state.lock:
            for queue in self._state.faults.values():
                queue.clear()
            self._state.recorded.clear()

    def requests(self, endpoint: Endpoint | None = None) -> list[Recorded]:
        """Requests received so far (to one endpoint, or all), oldest first."""
        with self._state.lock:
            return [r for r in self._state.recorded if endpoint is None or r.endpoint == endpoint]

    # --- used by the handler -------------------------------------------------------------------------

    def _record(self, recorded: Recorded) -> Fault | None:
        with self._state.lock:
            self._state.recorded.append(recorded)
            if recorded.endpoint is None:
                return None
            queue = self._state.faults[recorded.endpoint]
            return queue.popleft() if queue else None

    def _wait(self, seconds: float) -> None:
        """Sleep, but wake up when the server closes so no handler outlives the test."""
        self._stopping.wait(seconds)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that time out close their socket mid-answer; that is expected here."""


def _error(status: int, message: str) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_exceeded"}
    return {"error": {"message": message, "type": kind.get(status, "server_error"), "param": None, "code": None}}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: no access log on stderr."""

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        endpoint = _PATHS.get(path)
        headers = {key.lower(): value for key, value in self.headers.items()}
        fault = self.fake._record(Recorded(endpoint=endpoint, path=path, headers=headers, body=body))
        if endpoint is None:
            self._send_json(404, _error(404, f"no route for POST {path}"))
            return
        fault = fault or Fault()
        if fault.delay:
            self.fake._wait(fault.delay)
        if fault.status is not None:
            extra = {} if fault.retry_after_ms is None else {"retry-after-ms": str(fault.retry_after_ms)}
            self._send_json(fault.status, _error(fault.status, f"scripted HTTP {fault.status}"), extra)
            return
        if fault.body is not None:
            self._send(200, fault.body, "application/json")
            return
        if not isinstance(body, dict):
            self._send_json(400, _error(400, "the body must be a JSON object"))
            return
        if endpoint == "embeddings":
            self._embeddings(body, fault)
        else:
            self._chat(body, fault)

    def _embeddings(self, body: dict[str, Any], fault: Fault) -> None:
        model, texts = body.get("model"), body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(model, str) or not isinstance(texts, list) or not texts:
            self._send_json(400, _error(400, "model and a non-empty input are required"))
            return
        if not all(isinstance(t, str) and t for t in texts):
            self._send_json(400, _error(400, "input must be non-empty strings"))
            return
        requested = body.get("dimensions")
        size = (
            requested if isinstance(requested, int) else self.fake.dimensions.get(model, self.fake.default_dimensions)
        )
        vectors = self.fake.embed(list(texts), size)
        vectors = [_shorten(list(v), size) for v in vectors]
        if fault.dimensions is not None:
            vectors = [(v * (fault.dimensions // len(v) + 1))[: fault.dimensions] for v in vectors]
        if fault.nan:
            vectors = [[math.nan, *v[1:]] for v in vectors]
        encoding = body.get("encoding_format", "float")
        items = [{"object": "embedding", "index": i, "embedding": _encode(v, encoding)} for i, v in enumerate(vectors)]
        items = items[: len(items) - fault.drop]
        if self.fake.shuffle:
            random.Random(len(items)).shuffle(items)
            if len(items) > 1 and [item["index"] for item in items] == sorted(item["index"] for item in items):
                items.reverse()
        tokens = sum(len(_WORD.findall(t)) for t in texts)
        self._send_json(
            200,
            {
                "object": "list",
                "data": items,
                "model": model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def _chat(self, body: dict[str, Any], fault: Fault) -> None:
        model, messages = body.get("model"), body.get("messages")
        if not isinstance(model, str) or not isinstance(messages, list) or not messages:
            self._send_json(400, _error(400, "model and messages are required"))
            return
        if fault.chat_content is not None:
            content = fault.chat_content
        else:
            content = self.fake.chat(body) if self.fake.chat is not None else self.fake.chat_content
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        if body.get("tools"):  # a forced tool call: the reply text is the call's arguments
            name = body["tools"][0]["function"]["name"]
            call = {"id": "call_fake", "type": "function", "function": {"name": name, "arguments": content}}
            message = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [call]}
        prompt_tokens = sum(len(_WORD.findall(str(m.get("content", "")))) for m in messages)
        completion_tokens = len(_WORD.findall(content))
        self._send_json(
            200,
            {
                "id": f"chatcmpl-fake{int(time.time() * 1000)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
        )

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode("utf-8"), "application/json", headers)

    def _send(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


def _shorten(vector: list[float], size: int) -> list[float]:
    """Cut to `size` and renormalize, as text-embedding-3 does for `dimensions`."""
    if len(vector) <= size:
        return vector
    cut = vector[:size]
    norm = math.sqrt(sum(x * x for x in cut)) or 1.0
    return [x / norm for x in cut]


def _encode(vector: Sequence[float], encoding: object) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return [float(x) for x in vector]
