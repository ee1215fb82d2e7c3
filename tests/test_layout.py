"""The package's shape: the public API pinned, generated code fresh, every sub-package installed. No database."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import memsoda_core
import memsoda_langchain
import memsoda_langgraph
import memsoda_llamaindex

ROOT = Path(__file__).resolve().parent.parent

CORE_API = {
    "DEFAULT_OPTIONS",
    "FIRST_PERSON_OPTIONS",
    "GENERAL_OPTIONS",
    "AnchorOptions",
    "ConversationOptions",
    "DateOptions",
    "EntitiesOptions",
    "KeywordOptions",
    "RecentOptions",
    "VectorOptions",
    "FusionChoice",
    "ScopeStats",
    "LITERAL",
    "AsyncMemory",
    "ConfidenceError",
    "ConfigurationError",
    "DateError",
    "Embedder",
    "EmbedderMismatchError",
    "EmbeddingError",
    "EmptyFieldError",
    "EventLoopError",
    "Entity",
    "Episode",
    "EpisodeInput",
    "Fact",
    "FactInput",
    "FactPage",
    "ExtractionError",
    "ExtractionRequest",
    "Extractor",
    "ExtractorLike",
    "TimeInput",
    "FactSource",
    "ImportFormatError",
    "ForgetReport",
    "ImportReport",
    "RetentionReport",
    "RetentionRule",
    "LangChainExtractor",
    "LlamaIndexExtractor",
    "Message",
    "OpenAIExtractor",
    "RejectedOperation",
    "RememberResult",
    "IntervalError",
    "InvalidTextError",
    "ItemInput",
    "ArgumentTypeError",
    "LayoutChangedError",
    "LimitError",
    "LocalEmbedder",
    "MaintainReport",
    "Memory",
    "MemsodaError",
    "NotFoundError",
    "NotLiveError",
    "OpenAISynthesizer",
    "Profile",
    "RecallOptions",
    "RecallResult",
    "SchemaError",
    "ScopeArgs",
    "ScopeError",
    "ScoredFact",
    "SignalHit",
    "StoreBusyError",
    "StoreError",
    "StoreUnavailableError",
    "ReadOnlyStoreError",
    "StoredItem",
    "Synthesizer",
    "TextTooLongError",
    "UnorderedValueError",
    "ValidationError",
    "default_embedder",
}


def test_the_public_api_is_what_the_packages_export() -> None:
    """Modules inside the packages may move; these names, imported from the package, stay."""
    assert set(memsoda_core.__all__) == CORE_API
    assert set(memsoda_langchain.__all__) == {
        "LangChainEmbedder",
        "MemsodaContextMiddleware",
        "MemsodaRetriever",
        "memory_tools",
        "render_facts",
    }
    assert set(memsoda_llamaindex.__all__) == {
        "LlamaIndexEmbedder",
        "MemsodaMemoryBlock",
        "MemsodaProfileBlock",
        "MemsodaRetriever",
    }
    assert set(memsoda_langgraph.__all__) == {"MemsodaStore"}
    for package in (memsoda_core, memsoda_langchain, memsoda_langgraph, memsoda_llamaindex):
        for name in package.__all__:
            assert getattr(package, name) is not None, name


def test_the_generated_sync_modules_are_fresh() -> None:
    """`Memory` and the sync runner are generated from their async sources; a stale one fails here
    as it fails `./dev test`."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "async_to_sync.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_sync_runner_is_generated_not_written() -> None:
    for generated in ("memsoda_core/runner/sync_runner.py", "memsoda_core/memory.py"):
        first = (ROOT / generated).read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# Generated from "), generated
        assert "async def" not in (ROOT / generated).read_text(encoding="utf-8"), generated


def test_every_subpackage_is_installed() -> None:
    """pyproject's package discovery finds every sub-package (and the data directories), so a wheel
    holds them all."""
    import tomllib

    from setuptools import find_namespace_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    listed = set(find_namespace_packages(str(ROOT), include=find["include"], exclude=find["exclude"]))
    found = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for package in ("memsoda_core", "memsoda_langchain", "memsoda_langgraph", "memsoda_llamaindex")
        for path in (ROOT / package).rglob("__init__.py")
    }
    assert found <= listed, sorted(found - listed)
    assert {"memsoda_core.data", "memsoda_core.prompts"} <= listed
    for name in found:
        importlib.import_module(name)
