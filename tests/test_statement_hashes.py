"""Every SQL statement memsoda builds is byte-identical to the one pinned in tests/statement_hashes.txt
(by sha256, `tools/statement_hashes.py`): a change to a statement's text must be meant. No database."""

from __future__ import annotations

from tools.statement_hashes import GOLDEN, lines

REGENERATE = "if the change is intended, run `python tools/statement_hashes.py --write` and commit the file"


def _pinned(text: str) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in text.splitlines() if line)


def _difference(pinned: dict[str, str], built: dict[str, str]) -> list[str]:
    """What changed, by name: hashes that moved, statements added and removed."""
    changed = sorted(name for name in pinned.keys() & built.keys() if pinned[name] != built[name])
    added = sorted(built.keys() - pinned.keys())
    removed = sorted(pinned.keys() - built.keys())
    out: list[str] = []
    for title, names in (("changed", changed), ("added", added), ("removed", removed)):
        if names:
            out.append(f"{len(names)} {title}:")
            out += [f"  {name}" for name in names]
    return out


def test_every_statement_is_the_one_pinned() -> None:
    pinned = _pinned(GOLDEN.read_text())
    built = _pinned("\n".join(lines()))
    difference = _difference(pinned, built)
    assert not difference, "\n".join(["statements differ from tests/statement_hashes.txt:", *difference, REGENERATE])


def test_the_difference_names_what_changed() -> None:
    pinned = {"a": "1", "b": "2", "c": "3"}
    built = {"a": "1", "b": "9", "d": "4"}
    assert _difference(pinned, built) == ["1 changed:", "  b", "1 added:", "  d", "1 removed:", "  c"]
