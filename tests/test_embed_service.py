"""The embedding service of `memsoda server start` (memsoda_core/embed_service.py), for real: the
server started by the test in a temporary MEMSODA_HOME holds the offline model, a `memsoda recall` in
a fresh process embeds through its socket without importing torch or sentence-transformers and gives
the in-process recall's result; failures reach the client as EmbeddingError."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from memsoda_core import LocalEmbedder, Memory, ScopeArgs
from memsoda_core import embed_service as service
from memsoda_core.cli import app, server_status
from memsoda_core.errors import EmbeddingError
from tests.helpers import FaultyEmbedder

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
ENV = {"COLUMNS": "200", "NO_COLOR": "1", "MEMSODA_DSN": None}
LOAD_DEADLINE_S = 600.0
"""How long the server process may take to load the model (a deadline, not a measurement)."""

FACTS = [
    {"subject": "breaking bad", "predicate": "streams on", "object": "netflix", "valid_at": "2024-01-01"},
    {"subject": "user", "predicate": "favourite show is", "object": "breaking bad", "valid_at": "2026-08-16"},
    {"subject": "user", "predicate": "drives", "object": "honda civic", "valid_at": "2026-03-01"},
    {"subject": "user", "predicate": "drinks", "object": "green tea"},
]
QUERY = "anything good on Netflix tonight?"

# Runs the CLI in a fresh process, then reports which model libraries that process imported.
PROBE = """
import json, sys
from memsoda_core.cli import main
code = main(sys.argv[1:])
heavy = sorted(name for name in ("torch", "sentence_transformers", "transformers") if name in sys.modules)
print(json.dumps({"code": code, "imported": heavy}), file=sys.stderr)
"""


def wait_for_service(home: Path) -> service.EmbedReply:
    deadline = time.monotonic() + LOAD_DEADLINE_S
    while (served := service.hello(home)) is None:
        assert time.monotonic() < deadline, f"no embedding service in {home}; see {home / 'server.log'}"
        time.sleep(0.5)
    return served


@pytest.fixture(scope="module")
def served_home() -> Iterator[Path]:
    """A MEMSODA_HOME whose `memsoda server start` runs (PostgreSQL and the embedding service)."""
    home = Path(tempfile.mkdtemp(prefix="memsoda-embed-"))
    runner = CliRunner()
    try:
        started = runner.invoke(app, ["--home", str(home), "server", "start"], env=ENV)
        assert started.exit_code == 0, started.output
        wait_for_service(home)
        yield home
    finally:
        runner.invoke(app, ["--home", str(home), "server", "stop"], env=ENV)
        shutil.rmtree(home, ignore_errors=True)


def run_cli(*args: str, ok: bool = True) -> tuple[Any, list[str]]:
    """`memsoda ARGS --json` in a fresh process: its JSON output and the model libraries it imported."""
    env = {k: v for k, v in os.environ.items() if k not in ("MEMSODA_DSN", "MEMSODA_EMBEDDER", "OPENAI_API_KEY")}
    env.update(COLUMNS="200", NO_COLOR="1")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args, "--json"], capture_output=True, text=True, env=env, timeout=900
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["code"] == 0 or not ok, done.stderr
    return json.loads(done.stdout), report["imported"]


def summary(facts: list[dict[str, Any]]) -> list[tuple[str, float, dict[str, int]]]:
    return [(f["text"], f["score"], f["ranks"]) for f in facts]


def test_status_shows_the_served_model(served_home: Path) -> None:
    status = server_status(served_home)
    assert status["embedder"] == {"model": MINILM, "dimensions": 384}
    assert (served_home / service.SOCKET_NAME).stat().st_mode & 0o077 == 0  # the owner's alone


def test_cli_recall_embeds_through_the_service(served_home: Path, embedder: LocalEmbedder, scope: ScopeArgs) -> None:
    uri = server_status(served_home)["uri"]
    with Memory.open(uri, embedder) as memory:
        memory.add_facts(FACTS, **scope)
        expected = memory.recall(QUERY, **scope)
    assert not expected.degraded and expected.facts[0].ranks.get("vector")

    result, imported = run_cli(
        "--home", str(served_home), "recall", QUERY, "-d", scope["dataset"], "-p", scope["project"]
    )
    assert imported == []  # the model was not loaded in the CLI's process
    assert result["degraded"] is False
    assert summary(result["facts"]) == summary([f.to_dict() for f in expected.facts])
    assert result["context"] == expected.context

    # The same command where no service runs loads the model itself, and the probe sees it.
    with tempfile.TemporaryDirectory(prefix="memsoda-none-") as elsewhere:
        alone, imported_alone = run_cli(
            "--dsn", uri, "--home", elsewhere, "recall", QUERY, "-d", scope["dataset"], "-p", scope["project"]
        )
    assert "sentence_transformers" in imported_alone and "torch" in imported_alone
    assert summary(alone["facts"]) == summary(result["facts"])


def test_doctor_says_the_model_is_served(served_home: Path) -> None:
    checks, imported = run_cli("--home", str(served_home), "doctor", ok=False)  # it embeds a probe text
    assert imported == []
    embedder = next(check for check in checks if check["name"] == "embedder")
    assert embedder["status"] == "ok" and "from the server's embedding service" in embedder["detail"]


def test_the_client_gives_the_models_own_vectors(served_home: Path, embedder: LocalEmbedder) -> None:
    client = service.connect(served_home, MINILM)
    assert client is not None and (client.model, client.dimensions) == (MINILM, 384)
    texts = ["user drinks green tea", "breaking bad streams on netflix"]
    assert client.embed_documents(texts) == embedder.embed_documents(texts)
    assert service.connect(served_home, "another-model") is None


def test_a_client_of_a_gone_service_raises_embedding_error(tmp_path: Path) -> None:
    assert service.hello(tmp_path) is None
    client = service.ServiceEmbedder(tmp_path / service.SOCKET_NAME, MINILM, 384)
    with pytest.raises(EmbeddingError, match=r"embedding service .* failed"):
        client.embed_query("hello")


def test_a_failing_model_reaches_the_client_as_embedding_error(embedder: LocalEmbedder, tmp_path: Path) -> None:
    faulty = FaultyEmbedder(embedder)
    running = service.EmbedService(tmp_path, faulty).start()
    try:
        served = wait_for_service(tmp_path)
        client = service.ServiceEmbedder(tmp_path / service.SOCKET_NAME, served.model, served.dimensions)
        assert len(client.embed_query("fine")) == 384
        faulty.mode = "raise"
        with pytest.raises(EmbeddingError, match="embedding service failed: RuntimeError: embedding service exploded"):
            client.embed_query("now it breaks")
    finally:
        running.close()
    assert not (tmp_path / service.SOCKET_NAME).exists()
    assert service.hello(tmp_path) is None


def test_replies_round_trip_exactly_and_bad_ones_are_embedding_errors() -> None:
    vectors = [[0.1, -0.25, 1e-8], [3.0, 0.0, -1.5]]
    reply = service.decode_reply(service.encode_reply(service.EmbedReply(model="m", dimensions=3, vectors=vectors)))
    assert reply.model == "m" and reply.dimensions == 3
    assert reply.vectors == [np.asarray(row, dtype=np.float32).tolist() for row in vectors]
    good = json.loads(service.encode_reply(service.EmbedReply(model="m", dimensions=3, vectors=vectors)))
    for bad, needle in [
        (b"not json\n", "not JSON"),
        (b'{"error": "out of memory"}\n', "failed: out of memory"),
        (json.dumps({**good, "count": 3}).encode(), "bytes for 3 vectors"),
        (json.dumps({**good, "vectors": "@@@"}).encode(), "not base64"),
        (json.dumps({**good, "dimensions": "3"}).encode(), "malformed"),
        (b"[1, 2]\n", "malformed"),
    ]:
        with pytest.raises(EmbeddingError, match=needle):
            service.decode_reply(bad)
    with pytest.raises(ValueError):
        service.decode_request(b'{"texts": [1]}\n')
