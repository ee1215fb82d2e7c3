"""The `memsoda` command line (placeholder until the CLI issue lands)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Print help; the full CLI (demo, recall, import, ...) is tracked separately."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "demo":
        from .demo import run_demo

        run_demo()
        return 0
    print("usage: memsoda demo\n\nmemsoda: long-term memory retrieval for LLM agents.")
    return 0 if not args or args[0] in ("-h", "--help") else 2
