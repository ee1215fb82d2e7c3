"""Every public entry point checks its bool and int arguments the same way (`memsoda_core.checks`):
a bool where an int or a number goes, or anything but True/False where a bool goes, raises exactly
`ArgumentTypeError` at a call and `ConfigurationError` at open or for an embedder's settings. The
type is compared exactly, so a site left raising another error (even a subclass or base of the
right one) fails here."""

from __future__ import annotations

import io
import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from memsoda_core import (
    ArgumentTypeError,
    ConfigurationError,
    LimitError,
    LocalEmbedder,
    RecallOptions,
    ScopeArgs,
)
from memsoda_core.checks import CONFIGURATION, check_bool, check_int, check_number
from memsoda_core.embedders.openai import OpenAIEmbedder
from tests.conftest import Either, open_memory
from tests.scripted_extractor import ScriptedExtractor, answer

Call = Callable[[Either, ScopeArgs], Awaitable[Any]]


def _fact(**fields: Any) -> dict[str, Any]:
    return {"subject": "Ana", "predicate": "likes", "object": "tea", **fields}


def _remember(memory: Either, scope: ScopeArgs, **arguments: Any) -> Any:
    messages = [{"role": "user", "content": "I like tea"}]
    return memory.remember(messages, **scope, extractor=ScriptedExtractor(answer()), **arguments)


def _item(**fields: Any) -> dict[str, Any]:
    return {"namespace": ["notes"], "key": "k", "value": {"x": 1}, **fields}


AT_A_CALL: dict[str, Call] = {
    # an int (or a number) wanted, a bool given
    "list_facts limit": lambda m, s: m.list_facts(**s, limit=True),
    "profile max_facts": lambda m, s: m.profile(**s, max_facts=True),
    "profile min_confidence": lambda m, s: m.profile(**s, min_confidence=True),
    "recall facts_in_context": lambda m, s: m.recall("tea", **s, facts_in_context=True),
    "recall rrf_k": lambda m, s: m.recall("tea", **s, rrf_k=False),
    "remember related": lambda m, s: _remember(m, s, related=True),
    "import_jsonl batch_size": lambda m, s: m.import_jsonl(io.StringIO(""), **s, batch_size=True),
    "search_items limit": lambda m, s: m.search_items(("notes",), **s, limit=True),
    "search_items offset": lambda m, s: m.search_items(("notes",), **s, offset=False),
    "list_item_namespaces max_depth": lambda m, s: m.list_item_namespaces(**s, max_depth=True),
    "put_items ttl_minutes": lambda m, s: m.put_items([_item(ttl_minutes=True)], **s),
    # True or False wanted, something else given
    "maintain retention": lambda m, s: m.maintain(retention="no"),
    "set_single_valued single_valued": lambda m, s: m.set_single_valued(["likes"], **s, single_valued=1),
    "add_facts single_valued": lambda m, s: m.add_facts([_fact(single_valued="yes")], **s),
    "import_jsonl rebuild_index": lambda m, s: m.import_jsonl(io.StringIO(""), **s, rebuild_index=0),
    "remember summarize": lambda m, s: _remember(m, s, summarize="yes"),
    "get_item refresh_ttl": lambda m, s: m.get_item(("notes",), "k", **s, refresh_ttl=1),
    "search_items refresh_ttl": lambda m, s: m.search_items(("notes",), **s, refresh_ttl="yes"),
}


@pytest.mark.parametrize("call", AT_A_CALL.values(), ids=AT_A_CALL.keys())
async def test_a_call_rejects_a_wrong_type_with_argument_type_error(
    memory: Either, scope: ScopeArgs, call: Call
) -> None:
    with pytest.raises(Exception) as raised:
        await call(memory, scope)
    assert raised.type is ArgumentTypeError, raised.value


@pytest.mark.parametrize(
    "arguments",
    [{"as_of_from_question": "yes"}, {"rrf_k": True}, {"min_confidence": False}],
    ids=["bool option", "int option", "number option"],
)
def test_recall_options_reject_a_wrong_type_with_argument_type_error(arguments: dict[str, Any]) -> None:
    with pytest.raises(Exception) as raised:
        RecallOptions(**arguments)
    assert raised.type is ArgumentTypeError, raised.value


AT_OPEN: dict[str, dict[str, Any]] = {
    "pool_size": {"pool_size": True},
    "pool_timeout": {"pool_timeout": True},
    "tenant_index_min_facts": {"tenant_index_min_facts": True},
    "worker_reads": {"worker_reads": "no"},
    "read_only": {"read_only": 1},
}


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("arguments", AT_OPEN.values(), ids=AT_OPEN.keys())
async def test_open_rejects_a_wrong_type_with_configuration_error(
    pg_dsn: str, embedder: LocalEmbedder, flavour: str, arguments: dict[str, Any]
) -> None:
    with pytest.raises(Exception) as raised:
        opened = await open_memory(flavour, pg_dsn, embedder, **arguments)
        await opened.close()
    assert raised.type is ConfigurationError, raised.value


async def test_reembed_rejects_a_bool_batch_size_with_configuration_error(
    memory: Either, embedder: LocalEmbedder
) -> None:
    """`reembed`'s settings are documented as `ConfigurationError`, as an embedder's are."""
    with pytest.raises(Exception) as raised:
        await memory.reembed(embedder, batch_size=True)
    assert raised.type is ConfigurationError, raised.value


@pytest.mark.parametrize(
    "arguments",
    [{"batch_size": True}, {"dimensions": True}, {"max_retries": False}, {"timeout": True}, {"timeout": "30"}],
    ids=["batch_size", "dimensions", "max_retries", "timeout bool", "timeout text"],
)
def test_openai_embedder_rejects_a_wrong_type_with_configuration_error(arguments: dict[str, Any]) -> None:
    with pytest.raises(Exception) as raised:
        OpenAIEmbedder("m", base_url="http://127.0.0.1:9", **arguments)
    assert raised.type is ConfigurationError, raised.value


# --- the checks themselves (no database) ----------------------------------------------------------


def test_messages_name_the_argument_what_it_must_be_and_what_was_given() -> None:
    with pytest.raises(ArgumentTypeError, match=r"^limit must be an int between 1 and 1000, got True$"):
        check_int(True, "limit", low=1, high=1000)
    with pytest.raises(LimitError, match=r"^limit must be an int between 1 and 1000, got 0$"):
        check_int(0, "limit", low=1, high=1000)
    with pytest.raises(ArgumentTypeError, match=r"^summarize must be True or False, got 'yes'$"):
        check_bool("yes", "summarize")
    with pytest.raises(ArgumentTypeError, match=r"^rebuild_index must be True, False or None, got 0$"):
        check_bool(0, "rebuild_index", or_none=True)
    with pytest.raises(ConfigurationError, match=r"^pool_timeout must be a positive number of seconds, got 0$"):
        check_number(0, "pool_timeout", positive=True, unit="seconds", errors=CONFIGURATION)
    with pytest.raises(ConfigurationError, match=r"^dimensions must be an int of at least 1 or None, got 0$"):
        check_int(0, "dimensions", low=1, or_none=True, errors=CONFIGURATION)
    with pytest.raises(LimitError, match="got <an integer of 1001 bits>"):
        check_int(2**1000, "rrf_k", low=0, high=2**31 - 1)


def test_a_number_is_never_nan_and_finite_unless_allowed() -> None:
    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(LimitError):
            check_number(value, "ttl_minutes", positive=True)
    with pytest.raises(LimitError):
        check_number(math.nan, "timeout", positive=True, finite=False)
    assert check_number(math.inf, "timeout", positive=True, finite=False) == math.inf
    assert check_number(2**1000, "x", low=0) == 2**1000  # compared as an integer, never converted
    assert check_int(None, "max_depth", low=1, or_none=True) is None
    assert check_bool(None, "rebuild_index", or_none=True) is None


async def test_an_int_beyond_a_floats_range_is_out_of_range(pg_dsn: str, embedder: LocalEmbedder) -> None:
    """A number is used as a float (a timeout in seconds): an int a float cannot hold passed the
    check and raised a bare OverflowError at its first use."""
    with pytest.raises(LimitError, match=r"^ttl_minutes must be .* within a float's range, got <an integer of"):
        check_number(10**400, "ttl_minutes", low=0)
    for flavour in ("sync", "async"):
        with pytest.raises(Exception) as raised:
            opened = await open_memory(flavour, pg_dsn, embedder, pool_timeout=10**400)
            await opened.close()
        assert raised.type is ConfigurationError, raised.value
    with pytest.raises(Exception) as raised:
        OpenAIEmbedder("m", base_url="http://127.0.0.1:9", timeout=10**400)
    assert raised.type is ConfigurationError, raised.value
