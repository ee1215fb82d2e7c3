"""The plan of a recall with a query and its embedding at the default options, and the signals it
runs: what the CLI, the demo and the statement tests name. Not in `recall.signals`, whose modules
`options` imports (the default options are made here)."""

from __future__ import annotations

from datetime import UTC, datetime

from memsoda_core.options import RecallOptions
from memsoda_core.recall.signals import RecallRequest, plan_for, planned_signals
from memsoda_core.validation import Scope

FULL_PLAN = plan_for(
    RecallRequest(
        scope=Scope(dataset="d", project="p"),
        query="q",
        embedding=(0.0,),
        options=RecallOptions(),
        at=datetime(2000, 1, 1, tzinfo=UTC),
    )
)
"""A recall with a query and its embedding."""


QUERY_SIGNALS: tuple[str, ...] = planned_signals(FULL_PLAN)
"""The signals of a recall with a query and its embedding (what the CLI and the demo show)."""
