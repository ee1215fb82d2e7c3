"""Reads on another node of the cluster (`steps.ReadOnNode`, a Citus worker read directly): what the
runner replies when the node answers, cannot be reached, or fails the statement, and when the run
may not read there at all. The embedded server stands for the node (it is one, at its address); the
reads' use on a real Citus cluster is in tests/citus/test_citus_defaults.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, LiteralString

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from memsoda_core import ConfigurationError, LocalEmbedder, Memory
from memsoda_core.runner.async_pool import node_conninfo
from memsoda_core.runner.steps import Execute, NotRead, Operation, read_on_node

SCHEMA = "node_reads"


@pytest.fixture(scope="module")
def memory(pg_dsn: str, embedder: LocalEmbedder) -> Iterator[Memory]:
    with Memory.open(pg_dsn, embedder, schema=SCHEMA) as opened:
        yield opened


def _node(dsn: str) -> tuple[str, int]:
    params = conninfo_to_dict(dsn)
    return str(params.get("host") or "localhost"), int(params.get("port") or 5432)


def _free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read(statement: LiteralString, host: str, port: int) -> Operation[list[Any] | NotRead]:
    return (yield from read_on_node(Execute(sql.SQL(statement)), host, port))


def test_a_read_on_a_node_returns_its_rows(memory: Memory, pg_dsn: str) -> None:
    host, port = _node(pg_dsn)
    assert memory._runner.run(_read("SELECT 41 + 1", host, port), read_only=True) == [(42,)]


def test_a_run_that_writes_never_reads_on_a_node(memory: Memory, pg_dsn: str) -> None:
    """A node's own connection would not see what the operation wrote in its transaction."""
    host, port = _node(pg_dsn)
    assert memory._runner.run(_read("SELECT 1", host, port)) is NotRead.NOT_TRIED


def test_a_statement_failing_on_the_node_says_so(memory: Memory, pg_dsn: str) -> None:
    host, port = _node(pg_dsn)
    assert memory._runner.run(_read("SELECT * FROM no_such_shard", host, port), read_only=True) is NotRead.FAILED
    assert memory._runner.run(_read("SELECT 1", host, port), read_only=True) == [(1,)]  # still read there


def test_a_node_that_cannot_be_reached_is_not_tried_again_for_a_while(memory: Memory) -> None:
    port = _free_port()
    nodes = memory._runner._nodes
    assert nodes is not None and nodes.reachable(("127.0.0.1", port))
    assert memory._runner.run(_read("SELECT 1", "127.0.0.1", port), read_only=True) is NotRead.NOT_TRIED
    assert not nodes.reachable(("127.0.0.1", port))
    assert memory._runner.run(_read("SELECT 1", "127.0.0.1", port), read_only=True) is NotRead.NOT_TRIED


@pytest.mark.parametrize("given", ["environment", "service"])
def test_the_node_address_wins_over_one_from_the_environment_or_a_service_file(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    """A coordinator's address in `PGHOSTADDR` or the DSN's service file would send the node's
    connection there (127.0.0.2: nothing listens); the node's own address must win."""
    dsn = pg_dsn
    if given == "environment":
        monkeypatch.setenv("PGHOSTADDR", "127.0.0.2")
    else:
        (tmp_path / "services").write_text("[coordinator]\nhostaddr=127.0.0.2\n")
        monkeypatch.setenv("PGSERVICEFILE", str(tmp_path / "services"))
        dsn = make_conninfo(pg_dsn, service="coordinator")
    with psycopg.connect(node_conninfo(dsn, _node(pg_dsn)), connect_timeout=5) as conn:
        assert conn.execute("SELECT 1").fetchall() == [(1,)]


def test_worker_reads_must_be_a_bool(pg_dsn: str, embedder: LocalEmbedder) -> None:
    with pytest.raises(ConfigurationError, match="worker_reads must be True or False"):
        Memory.open(pg_dsn, embedder, schema=SCHEMA, worker_reads="yes")  # type: ignore[arg-type]
