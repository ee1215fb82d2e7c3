"""Where and how commands print: the two consoles, JSON, yellow notes, spinners and plain tables."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.status import Status
from rich.table import Table
from rich.text import Text


def out() -> Console:
    return Console(soft_wrap=False)


def err() -> Console:
    return Console(stderr=True)


def one_line(text: str) -> str:
    return " ".join(text.split())


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")


def warn(message: str, *, soft_wrap: bool = False) -> None:
    """A yellow note on stderr; `soft_wrap` keeps a long one on one line."""
    err().print(Text(message, style="yellow"), soft_wrap=soft_wrap)


def spinner(message: str) -> Status:
    """A spinner on stderr while `message` is in progress."""
    return err().status(message, spinner="dots")


def table(*, header: bool = True) -> Table:
    """The borderless table every command prints (with a bold header row, or none)."""
    return Table(show_edge=False, show_header=header, header_style="bold", pad_edge=False)
