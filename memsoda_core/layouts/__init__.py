"""Tenant layouts as strategies behind one protocol (`layouts.protocol.Layout`), and the registry
of them. To add a layout: one module implementing the protocol, and its line in `REGISTRY`."""

from __future__ import annotations

from memsoda_core.errors import ConfigurationError
from memsoda_core.layouts import citus, partitioned, plain
from memsoda_core.layouts.protocol import Layout
from memsoda_core.store.info import StoreInfo

REGISTRY: dict[str, Layout] = {layout.name: layout for layout in (plain.LAYOUT, partitioned.LAYOUT, citus.LAYOUT)}
"""Layout name -> its strategy."""

OPENED_WITH = tuple(sorted(name for name, layout in REGISTRY.items() if layout.opened_with))
"""The layouts `Memory.open(layout=...)` accepts for a new store."""


def new_store_layout(asked: str | None, *, citus: bool) -> Layout:
    """The layout a new store is created in: `asked`, else plain where Citus is installed (Citus
    distributes plain tables) and partitioned elsewhere. One not for a Citus database
    (`Layout.on_citus`) is refused there."""
    chosen = REGISTRY[asked or ("plain" if citus else "partitioned")]
    if citus and not chosen.on_citus:
        raise ConfigurationError(f"the {chosen.name} layout is not for a Citus database: open it with layout='plain'")
    return chosen


def layout_of(info: StoreInfo) -> Layout:
    """The strategy of an open store's layout."""
    try:
        return REGISTRY[info.layout]
    except KeyError:
        raise ConfigurationError(f"unknown layout {info.layout!r}: one of {', '.join(REGISTRY)}") from None
