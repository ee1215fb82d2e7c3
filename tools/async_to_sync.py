"""Generate the sync modules from their async sources: `python tools/async_to_sync.py [--check]`.

The async code is the source (as in psycopg's `tools/async_to_sync.py`): each pair below is
rewritten token by token (`async def` -> `def`, `await x` -> `x`, async names -> sync names), a
line preceded by a `# sync: <line>` comment is replaced by that line, a line ending in `# async only`
is left out (what only an event loop needs, such as the check that one is used in the loop that
opened it), and the result is formatted by ruff. `--check` fails (exit 1) when a generated file
differs from what its source gives, which `./dev test` runs before the tests.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PAIRS = (
    ("memsoda_core/runner/async_pool.py", "memsoda_core/runner/sync_pool.py"),
    ("memsoda_core/runner/async_runner.py", "memsoda_core/runner/sync_runner.py"),
    ("memsoda_core/async_memory.py", "memsoda_core/memory.py"),
    ("memsoda_core/reembed/async_api.py", "memsoda_core/reembed/sync_api.py"),
)

RENAMES = (
    # (pattern, replacement), applied in order to every line that is not a `# sync:` pragma
    (r"\basync def ", "def "),
    (r"\basync with ", "with "),
    (r"\basync for ", "for "),
    (r"\bawait asyncio\.to_thread\((\w[\w.]*), ", r"\1("),
    (r"\bawait ", ""),
    (r"  # noqa: ASYNC\d+.*$", ""),
    (r"\bAwaitable\[([\w.\[\], ]+?)\]", r"\1"),
    (r"\bAsyncExitStack\b", "ExitStack"),
    (r"\benter_async_context\b", "enter_context"),
    (r"\bpush_async_exit\b", "push"),
    (r"\bpush_async_callback\b", "callback"),
    (r"\bAsyncConnectionPool\b", "ConnectionPool"),
    (r"\bAsyncConnection\b", "Connection"),
    (r"\bAsyncRawCursor\b", "RawCursor"),
    (r"\bAsyncCursor\b", "Cursor"),
    (r"\bregister_vector_async\b", "register_vector"),
    (r"\bAsyncRunner\b", "Runner"),
    (r"\basync_runner\b", "sync_runner"),
    (r"\basync_pool\b", "sync_pool"),
    (r"\bAsyncMemory\b", "Memory"),
    (r"\basync_memory\b", "memory"),
    (r"\basync_api\b", "sync_api"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baembed_documents\b", "embed_documents"),
    (r"\baembed_query\b", "embed_query"),
    (r"\basynthesize\b", "synthesize"),
    (r"\baclose_built\b", "close_built"),
)

PRAGMA = re.compile(r"^(\s*)# sync: (.*)$")
ASYNC_ONLY = "# async only"


def header(source: str) -> str:
    return f"# Generated from {source} by tools/async_to_sync.py: do not edit, edit the source and run it.\n"


def convert(text: str, source: str) -> str:
    """The sync module for async source `text` (not yet formatted)."""
    out: list[str] = []
    replacement: str | None = None
    for line in text.splitlines():
        pragma = PRAGMA.match(line)
        if pragma:
            replacement = pragma.group(1) + pragma.group(2)
            continue
        if replacement is not None:
            out.append(replacement)
            replacement = None
            continue
        if line.endswith(ASYNC_ONLY):
            continue
        for pattern, repl in RENAMES:
            line = re.sub(pattern, repl, line)
        out.append(line)
    return header(source) + "\n".join(out) + "\n"


def ruff(*args: str, stdin: str, filename: str) -> str:
    executable = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if executable is None:
        raise SystemExit("ruff is needed to format the generated files (pip install ruff)")
    done = subprocess.run(
        [executable, *args, "--stdin-filename", filename, "-"],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if done.returncode not in (0, 1) or not done.stdout:
        raise SystemExit(f"ruff {' '.join(args)} failed on {filename}:\n{done.stderr}")
    return done.stdout


def generate(source: str, target: str) -> str:
    text = convert((ROOT / source).read_text(encoding="utf-8"), source)
    text = ruff("check", "--fix-only", "--select", "F401,I001", "--quiet", stdin=text, filename=target)
    return ruff("format", "--quiet", stdin=text, filename=target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a generated file is stale")
    args = parser.parse_args(argv)
    stale = 0
    for source, target in PAIRS:
        wanted = generate(source, target)
        path = ROOT / target
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current == wanted:
            continue
        if args.check:
            stale += 1
            diff = difflib.unified_diff(
                current.splitlines(), wanted.splitlines(), target, f"{target} (from {source})", lineterm=""
            )
            print(f"{target} is stale: run python tools/async_to_sync.py", file=sys.stderr)
            print("\n".join(list(diff)[:40]), file=sys.stderr)
        else:
            path.write_text(wanted, encoding="utf-8")
            print(f"wrote {target}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
