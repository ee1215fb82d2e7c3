"""A real Citus cluster for the session: a coordinator and two workers on this machine (`Cluster` in
tools/citus.py, which builds Citus first when this venv lacks it), stopped and removed at the end
even after a failure; a store opened on the coordinator and distributed. Where no Citus source or
build is found, every test here is skipped with one reason (`tools/citus.py` `verdict`), or fails
where `MEMSODA_REQUIRE_CITUS` is set."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from memsoda_core import LocalEmbedder, Memory
from memsoda_core.distributed import Distribution, distribute
from tests.citus.citus_setup import BIG, SHARD_COUNT

if TYPE_CHECKING:
    from tools.citus import Cluster  # loaded from its file at run time (tools/ is no package)

ROOT = Path(__file__).resolve().parents[2]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "citus: runs on a real Citus cluster (part of ./dev test)")


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("memsoda_citus_tool", ROOT / "tools" / "citus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through it
    spec.loader.exec_module(module)
    return module


CITUS = _tool()
VERDICT = CITUS.verdict(CITUS.locate(os.environ, CITUS.pginstall()), os.environ)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture: skip (raised here, so every test shares this line's location and the
    summary folds them into one line) or fail each test here when Citus is missing."""
    if VERDICT.action == "skip":
        pytest.skip(VERDICT.message)
    if VERDICT.action == "fail":
        pytest.fail(VERDICT.message, pytrace=False)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The running cluster (`tools/citus.py` `Cluster`): `.dsn`, `.worker_nodes`, `stop_node`..."""
    root = Path(tempfile.mkdtemp(prefix="memsoda-citus-"))
    try:
        with CITUS.Cluster(root) as running:
            yield running
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def distributed(cluster: Cluster, embedder: LocalEmbedder) -> Distribution:
    """The store on the coordinator, created by `Memory.open`, then distributed."""
    Memory.open(cluster.dsn, embedder).close()
    return distribute(cluster.dsn, shard_count=SHARD_COUNT, isolate=[BIG], transfer_mode="block_writes")


@pytest.fixture
def citus_memory(cluster: Cluster, distributed: Distribution, embedder: LocalEmbedder) -> Iterator[Memory]:
    """A Memory on the coordinator of the distributed store."""
    with Memory.open(cluster.dsn, embedder) as memory:
        yield memory
