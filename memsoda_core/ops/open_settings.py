"""What `Memory.open` settles before the runner starts: its arguments checked, the store's target,
the embedder and the arguments of `ops.open_store`; and closing the embedder it built."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memsoda_core.checks import CONFIGURATION, check_int
from memsoda_core.embedders import Embedder
from memsoda_core.embedders.choice import EXPLICIT, build, choose
from memsoda_core.embedders.openai import OpenAIEmbedder
from memsoda_core.errors import ConfigurationError
from memsoda_core.layouts import OPENED_WITH
from memsoda_core.ops.opening import recorded_space
from memsoda_core.runner.embedding import check_embedder
from memsoda_core.runner.once import run_once
from memsoda_core.runner.target import Target, check_schema_name, release_target, resolve_target


@dataclass(frozen=True, kw_only=True)
class OpenSettings:
    """Where the store is, the embedder to open it with, and the arguments of `ops.open_store`."""

    target: Target
    embedder: Embedder
    store: Mapping[str, Any]


def check_open_args(
    schema: str, tenant_index_min_facts: int | None, layout: str | None, text_search_config: str | None = None
) -> str:
    """`open`'s store settings checked before anything starts; returns the checked schema name."""
    if text_search_config is not None and (not isinstance(text_search_config, str) or not text_search_config):
        raise ConfigurationError(
            f"text_search_config must be a configuration's name or None, got {text_search_config!r}"
        )
    if layout is not None and layout not in OPENED_WITH:
        raise ConfigurationError(f"layout must be one of {', '.join(OPENED_WITH)} or None, got {layout!r}")
    check_int(tenant_index_min_facts, "tenant_index_min_facts", low=1, or_none=True, errors=CONFIGURATION)
    return check_schema_name(schema)


def open_settings(
    embedder: Embedder | None,
    dsn: str | None,
    home: str | os.PathLike[str] | None,
    schema: str,
    text_search_config: str | None,
    tenant_index_min_facts: int | None,
    layout: str | None = None,
) -> OpenSettings:
    """The settings checked, the store's target (`runner.target.resolve_target`; released again
    if this fails), the embedder (`embedder`, else the one `embedders.choice.choose` picks for
    the store, whose recorded model is read first) and the arguments of `ops.open_store` for it.
    The vector size comes from the store or a known model where it can, else from the embedder
    (the local model loads here, so never under a recall's timeout)."""
    checked = check_open_args(schema, tenant_index_min_facts, layout, text_search_config)
    target = resolve_target(dsn, home)
    try:
        if embedder is not None:
            chosen, origin = check_embedder(embedder), EXPLICIT
        else:
            # An existing store's recorded model wins over the environment's default.
            choice = choose(run_once(target.dsn, recorded_space(checked)))
            assert choice.spec is not None
            chosen, origin = build(choice.spec, dimensions=choice.dimensions), choice.origin
        return OpenSettings(
            target=target,
            embedder=chosen,
            store={
                "schema": checked,
                "model": str(chosen.model),
                "dimensions": int(chosen.dimensions),
                "text_search_config": text_search_config,
                "tenant_index_min_facts": tenant_index_min_facts,
                "layout": layout,
                "origin": origin,
            },
        )
    except BaseException:
        release_target(target)
        raise


def close_built(embedder: Embedder | None) -> None:
    """Close the HTTP client of an OpenAI embedder `open` built (the caller closes its own)."""
    if isinstance(embedder, OpenAIEmbedder):
        embedder.close()


async def aclose_built(embedder: Embedder | None) -> None:
    """`close_built` for an AsyncMemory (both clients; the sync code calls `close_built`)."""
    if isinstance(embedder, OpenAIEmbedder):
        await embedder.aclose()
