"""How a layout's writes send a batch of rows (`layouts.Layout.write_form`); the statements of
either form are built by `writing.inserts`."""

from __future__ import annotations

from enum import Enum


class WriteForm(Enum):
    """How a write's statements send a batch of rows."""

    ARRAYS = "arrays"
    """`INSERT ... SELECT FROM unnest(arrays)`: one statement text for any batch."""
    ROWS = "rows"
    """Multi-row VALUES, the tenant bound in every row, `writing.inserts.ROWS_PER_STATEMENT` rows a
    statement."""
