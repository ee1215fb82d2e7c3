"""Importing a file again adds nothing: facts resolve to the stored ones (merged), episodes already
stored are not written again, and `ImportReport` says what was new and what was already there;
through the public API (sync and async), the CLI, and two imports at once."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from memsoda_core import ImportFormatError, ImportReport, Memory, ScopeArgs
from memsoda_core.cli import app
from tests.conftest import Either

FACTS = [
    {"subject": "user", "predicate": "likes", "object": "tea", "valid_at": "2026-01-01"},
    {"subject": "user", "predicate": "drives", "object": "honda civic", "object_type": "PRODUCT"},
    {"subject": "breaking bad", "predicate": "streams on", "object": "netflix", "object_type": "PRODUCT"},
]
EPISODES = [
    {"kind": "episode", "thread_id": "t1", "text": "Talked about tea.", "created_at": "2026-09-01T10:00:00Z"},
    {"kind": "episode", "thread_id": "t2", "text": "Talked about cars.", "created_at": "2026-09-02T10:00:00Z"},
    {"kind": "episode", "text": "A note with no thread.", "created_at": "2026-09-03T10:00:00Z"},
]


def jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


async def load(memory: Either, text: str, scope: ScopeArgs, **kwargs: Any) -> ImportReport:
    report: ImportReport = await memory.import_jsonl(io.StringIO(text), **scope, **kwargs)
    return report


async def counts(memory: Either, scope: ScopeArgs) -> tuple[int, int]:
    (row,) = await memory.stats(**scope)
    return row["facts"], row["episodes"]


def split(report: ImportReport) -> tuple[int, int, int, int]:
    return report.facts_new, report.facts_merged, report.episodes_new, report.episodes_present


async def exported(memory: Either, scope: ScopeArgs) -> list[dict[str, Any]]:
    buffer = io.StringIO()
    await memory.export_jsonl(buffer, **scope)
    return [{k: v for k, v in json.loads(line).items() if k != "id"} for line in buffer.getvalue().splitlines()]


async def test_importing_twice_changes_nothing(memory: Either, scope: ScopeArgs) -> None:
    await memory.add_facts(FACTS, **scope)
    await memory.add_episodes([{k: v for k, v in e.items() if k != "kind"} for e in EPISODES], **scope)
    await memory.add_episodes([{"thread_id": "t1", "text": "Stamped now."}], **scope)  # a time to the microsecond
    buffer = io.StringIO()
    await memory.export_jsonl(buffer, **scope)
    copy: ScopeArgs = {**scope, "dataset": scope["dataset"] + "-copy"}
    first = await load(memory, buffer.getvalue(), copy)
    assert (first.facts, first.episodes, first.skipped) == (3, 4, 0)
    assert split(first) == (3, 0, 4, 0)
    after_first = await exported(memory, copy)
    second = await load(memory, buffer.getvalue(), copy)
    assert (second.facts, second.episodes, second.skipped) == (3, 4, 0)
    assert split(second) == (0, 3, 0, 4)
    assert await counts(memory, copy) == (3, 4)
    assert await exported(memory, copy) == after_first
    back = await load(memory, buffer.getvalue(), scope)  # into the scope it came from
    assert split(back) == (0, 3, 0, 4)
    assert await counts(memory, scope) == (3, 4)


async def test_one_changed_line_is_exactly_what_is_new(memory: Either, scope: ScopeArgs) -> None:
    assert split(await load(memory, jsonl(FACTS + EPISODES), scope)) == (3, 0, 3, 0)
    fact_changed = [{**FACTS[0], "object": "coffee"}, *FACTS[1:]]
    assert split(await load(memory, jsonl(fact_changed + EPISODES), scope)) == (1, 2, 0, 3)
    text_changed = [*EPISODES[:2], {**EPISODES[2], "text": "Another note."}]
    assert split(await load(memory, jsonl(FACTS + text_changed), scope)) == (0, 3, 1, 2)
    time_changed = [{**EPISODES[0], "created_at": "2026-09-08T10:00:00Z"}, *EPISODES[1:]]
    assert split(await load(memory, jsonl(FACTS + time_changed), scope)) == (0, 3, 1, 2)  # the same talk a week on
    thread_changed = [*EPISODES[:1], {**EPISODES[1], "thread_id": "t3"}, EPISODES[2]]
    assert split(await load(memory, jsonl(FACTS + thread_changed), scope)) == (0, 3, 1, 2)
    assert await counts(memory, scope) == (4, 6)


async def test_repeated_and_undated_lines(memory: Either, scope: ScopeArgs) -> None:
    """Equal lines in one file are one episode; a line without a time is stamped with the
    import's, and the next import of it finds that episode (same thread and text)."""
    undated = {"kind": "episode", "thread_id": "t9", "text": "No time given."}
    lines = jsonl([EPISODES[0], EPISODES[0], undated, undated, FACTS[0], FACTS[0]])
    first = await load(memory, lines, scope)
    assert (first.facts, first.episodes) == (2, 4)
    assert split(first) == (1, 1, 2, 2)
    assert split(await load(memory, lines, scope)) == (0, 2, 0, 4)
    assert await counts(memory, scope) == (1, 2)


async def test_skip_reports_the_same_bad_lines_each_time(memory: Either, scope: ScopeArgs) -> None:
    lines = jsonl(FACTS[:2]) + "{not json\n" + jsonl([EPISODES[0], {"kind": "episode", "text": ""}])
    for expected in ((2, 0, 1, 0), (0, 2, 0, 1)):
        report = await load(memory, lines, scope, on_error="skip")
        assert (report.facts, report.episodes, report.skipped) == (2, 1, 2)
        assert [number for number, _ in report.errors] == [3, 5]
        assert split(report) == expected
    assert await counts(memory, scope) == (2, 1)


def owned_by_items(pg_dsn: str, scope: ScopeArgs) -> dict[str, bool]:
    """Each fact's object and whether it is items' own (`facts.item_owned`)."""
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            "SELECT object, item_owned FROM memsoda.facts WHERE dataset = %s AND project = %s",
            (scope["dataset"], scope["project"]),
        ).fetchall()
    return {str(obj): bool(owned) for obj, owned in rows}


async def test_an_export_says_which_facts_items_own_and_an_import_keeps_it(
    memory: Either, scope: ScopeArgs, pg_dsn: str
) -> None:
    await memory.put_items([{"namespace": ["notes"], "key": "k", "value": {"t": 1}, "text": "buy milk"}], **scope)
    await memory.add_facts([{"subject": "user", "predicate": "likes", "object": "tea"}], **scope)
    out = io.StringIO()
    await memory.export_jsonl(out, **scope)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    facts = [line for line in lines if line["kind"] == "fact"]
    assert [line.get("item_owned") for line in facts] == [True, None]  # written only when true
    copy: ScopeArgs = {**scope, "project": "copy"}
    await load(memory, out.getvalue(), copy)
    assert owned_by_items(pg_dsn, copy) == {"buy milk": True, "tea": False}
    note = {"namespace": ["notes"], "key": "k", "text": "buy milk"}
    await memory.put_items([{**note, "value": {"t": 2}}], **copy)  # an item comes to refer to it
    await memory.put_items([{**note, "value": None}], **copy)  # and goes: items' own fact ends
    assert [f.object for f in (await memory.list_facts(**copy)).facts] == ["tea"]
    # an item-owned line equal to a fact the application wrote leaves it the application's
    both: ScopeArgs = {**scope, "project": "both"}
    await memory.add_facts([{"subject": "user", "predicate": "noted", "object": "buy milk"}], **both)
    await load(memory, out.getvalue(), both)
    assert owned_by_items(pg_dsn, both) == {"buy milk": False, "tea": False}
    # a file from before the field imports every fact as the application's
    old = "".join(json.dumps({k: v for k, v in line.items() if k != "item_owned"}) + "\n" for line in lines)
    legacy: ScopeArgs = {**scope, "project": "legacy"}
    await load(memory, old, legacy)
    assert owned_by_items(pg_dsn, legacy) == {"buy milk": False, "tea": False}
    with pytest.raises(ImportFormatError, match="item_owned"):
        await load(memory, jsonl([{**lines[0], "item_owned": "yes"}]), {**scope, "project": "bad"})


async def test_an_items_own_line_no_imported_item_takes_is_the_applications(
    memory: Either, scope: ScopeArgs, pg_dsn: str
) -> None:
    """Items' own facts stay live only while an item refers to them. A fact line marked item_owned
    whose item line the import does not write (skipped, missing, or replaced by a later line of its
    key without text) would leave a live fact of items' own that nothing ever ends: it becomes the
    application's, kept. One that a stored item refers to stays items' own."""
    await memory.put_items([NOTES[0]], **scope)
    out = io.StringIO()
    await memory.export_jsonl(out, **scope)
    fact, item = (json.loads(line) for line in out.getvalue().splitlines())
    assert fact["item_owned"] is True
    files = {
        "skipped": jsonl([fact, {**item, "value": [1]}]),
        "missing": jsonl([fact]),
        "replaced": jsonl([fact, item, {**item, "fact_id": None}]),
    }
    for name, text in files.items():
        into: ScopeArgs = {**scope, "project": name}
        await load(memory, text, into, on_error="skip")
        assert owned_by_items(pg_dsn, into) == {"buy milk": False}, name
        assert [f.object for f in (await memory.list_facts(**into)).facts] == ["buy milk"], name
    await load(memory, files["missing"], scope)  # the stored item refers to it still
    assert owned_by_items(pg_dsn, scope) == {"buy milk": True}


def test_two_imports_at_once_write_each_episode_once(sync_memory: Memory, scope: ScopeArgs) -> None:
    text = jsonl(EPISODES + [{"kind": "episode", "thread_id": "t1", "text": f"note {n}"} for n in range(40)])
    start = threading.Barrier(2)
    reports: list[ImportReport] = []

    def run() -> None:
        start.wait()
        reports.append(sync_memory.import_jsonl(io.StringIO(text), **scope))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted((r.episodes_new, r.episodes_present) for r in reports) == [(0, 43), (43, 0)]
    ((row,),) = [sync_memory.stats(**scope)]
    assert row["episodes"] == 43


def test_cli_says_what_was_new(pg_dsn: str, scope: ScopeArgs, tmp_path: Path) -> None:
    path = tmp_path / "memory.jsonl"
    path.write_text(jsonl(FACTS + EPISODES), encoding="utf-8")
    where = ["--dataset", scope["dataset"], "--project", scope["project"]]
    outputs = []
    for _ in range(2):
        result = CliRunner().invoke(app, ["--dsn", pg_dsn, "import", str(path), *where], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        outputs.append(result.stdout)
    target = f"{scope['dataset']}/{scope['project']}"
    assert f"imported 3 facts and 3 episodes into {target}" in outputs[0]
    assert "(new: 3 facts, 3 episodes; already stored: 0 facts merged, 0 episodes)" in outputs[0]
    assert "(new: 0 facts, 0 episodes; already stored: 3 facts merged, 3 episodes)" in outputs[1]


def item_facts(pg_dsn: str, scope: ScopeArgs) -> dict[str, tuple[str | None, bool | None, bool | None]]:
    """Each item's key: the object of its fact, whether that fact is live and items' own."""
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            """SELECT i.key, f.object, f.id IS NOT NULL AND f.invalid_at IS NULL AND f.superseded_by IS NULL,
                      f.item_owned
               FROM memsoda.items i LEFT JOIN memsoda.facts f
                 ON f.dataset = i.dataset AND f.project = i.project AND f.id = i.fact_id
               WHERE i.dataset = %s AND i.project = %s""",
            (scope["dataset"], scope["project"]),
        ).fetchall()
    return {str(key): (obj, live, owned) for key, obj, live, owned in rows}


NOTES: list[dict[str, Any]] = [
    {"namespace": ["notes", "home"], "key": "milk", "value": {"n": 1}, "text": "buy milk", "ttl_minutes": 60.0},
    {"namespace": ["notes"], "key": "plain", "value": {"nested": {"a": [1, 2]}}},
    {"namespace": ["notes"], "key": "plants", "value": {"n": 3}, "text": "water the plants"},
]


async def test_an_export_carries_items_and_an_import_restores_them(
    memory: Either, scope: ScopeArgs, pg_dsn: str
) -> None:
    await memory.add_facts([{"subject": "user", "predicate": "noted", "object": "water the plants"}], **scope)
    await memory.put_items(NOTES, **scope)
    out = io.StringIO()
    lines = await memory.export_jsonl(out, **scope)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines == len(records) == 5 and [r["kind"] for r in records] == ["fact", "fact", "item", "item", "item"]
    copy: ScopeArgs = {**scope, "project": "copy"}
    report = await load(memory, out.getvalue(), copy)
    assert (report.facts, report.items) == (2, 3)
    for note in NOTES:
        source = await memory.get_item(note["namespace"], note["key"], **scope)
        restored = await memory.get_item(note["namespace"], note["key"], **copy)
        same = ("namespace", "key", "value", "created_at", "updated_at", "expires_at")
        assert [getattr(restored, name) for name in same] == [getattr(source, name) for name in same]
    # each item refers to its fact, which is items' own only where it was (the application wrote "plants")
    links = {
        "milk": ("buy milk", True, True),
        "plain": (None, False, None),
        "plants": ("water the plants", True, False),
    }
    assert item_facts(pg_dsn, copy) == links
    (found,) = await memory.search_items(["notes", "home"], query="groceries to get", **copy)
    assert found.key == "milk" and found.score
    # importing it again changes nothing; the items' facts stay live, items' own exactly where they were
    report = await load(memory, out.getvalue(), copy)
    assert (report.facts_new, report.items) == (0, 3) and item_facts(pg_dsn, copy) == links
    await memory.put_items([{**NOTES[0], "value": None}, {**NOTES[2], "value": None}], **copy)
    assert [f.object for f in (await memory.list_facts(**copy)).facts] == ["water the plants"]


async def test_an_imported_item_replaces_the_one_at_its_key_and_ends_its_fact(
    memory: Either, scope: ScopeArgs, pg_dsn: str
) -> None:
    await memory.put_items([NOTES[0]], **scope)
    out = io.StringIO()
    await memory.export_jsonl(out, **scope)
    target: ScopeArgs = {**scope, "project": "target"}
    await memory.put_items([{**NOTES[0], "text": "buy eggs", "value": {"n": 9}}], **target)
    await load(memory, out.getvalue(), target)
    item = await memory.get_item(["notes", "home"], "milk", **target)
    assert item is not None and item.value == {"n": 1}
    assert item_facts(pg_dsn, target) == {"milk": ("buy milk", True, True)}
    assert [f.object for f in (await memory.list_facts(**target)).facts if f.invalid_at is None] == ["buy milk"]


async def test_an_item_refers_to_the_fact_line_above_it(memory: Either, scope: ScopeArgs) -> None:
    """An item line's `fact_id` names the one fact line above it with that id: a fact line further
    down with the same id (two exports joined) does not re-point the item at its fact."""
    milk = {"kind": "fact", "id": 7, "subject": "user", "predicate": "noted", "object": "buy milk"}
    item = {"kind": "item", "namespace": ["notes"], "key": "k", "value": {"n": 1}, "fact_id": 7}
    eggs = {**milk, "object": "buy eggs"}
    report = await load(memory, jsonl([milk, item, eggs]), scope)
    assert (report.facts, report.items) == (2, 1)
    got = await memory.get_item(["notes"], "k", **scope)
    assert got is not None and got.fact_id is not None
    fact = await memory.get_fact(got.fact_id, **scope)
    assert fact is not None and fact.object == "buy milk"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"fact_id": 999_999}, "fact_id 999999, which no fact line above it has"),
        ({"fact_id": "1"}, "fact_id must be the id of a fact line"),
        ({"value": [1]}, "must be a dict"),
        ({"namespace": []}, "at least one label"),
        ({"ttl_minutes": None, "expires_at": "2030-01-01"}, "expires_at needs ttl_minutes"),
        ({"colour": "red"}, "an item line needs namespace, key and value"),
    ],
)
async def test_a_bad_item_line_imports_nothing(
    memory: Either, scope: ScopeArgs, bad: dict[str, Any], message: str
) -> None:
    await memory.put_items([NOTES[0]], **scope)
    out = io.StringIO()
    await memory.export_jsonl(out, **scope)
    fact, item = (json.loads(line) for line in out.getvalue().splitlines())
    target: ScopeArgs = {**scope, "project": "target"}
    with pytest.raises(ImportFormatError, match=rf"line 2: .*{message}"):
        await load(memory, jsonl([fact, {**item, **bad}]), target)
    assert await memory.stats(**target) == [] or await counts(memory, target) == (0, 0)
    assert await memory.search_items(["notes"], **target) == []
    with pytest.raises(ImportFormatError, match=r"line 1: .*no fact line above it"):  # the fact's line comes first
        await load(memory, jsonl([item, fact]), target)
    report = await load(memory, jsonl([fact, {**item, **bad}, {**item, "key": "other"}]), target, on_error="skip")
    assert (report.facts, report.items, [n for n, _ in report.errors]) == (1, 1, [2])


async def test_an_item_line_whose_expiry_is_past_the_year_9999_is_named(memory: Either, scope: ScopeArgs) -> None:
    """An item line's expiry (without `expires_at`: `ttl_minutes` after its `updated_at`) past
    what a time can hold raised a bare OverflowError, even with `on_error="skip"`."""
    far = {"kind": "item", "namespace": ["n"], "key": "k", "value": {"a": 1}, "ttl_minutes": 60.0}
    far["updated_at"] = "9999-12-31T23:30:00+00:00"
    with pytest.raises(ImportFormatError, match=r"^line 1: updated_at .* plus ttl_minutes 60 is past the year 9999"):
        await load(memory, jsonl([far]), scope)
    report = await load(memory, jsonl([far, {**far, "key": "near", "updated_at": None}]), scope, on_error="skip")
    assert (report.items, [n for n, _ in report.errors]) == (1, [1])


def test_an_import_of_more_items_than_the_lock_table_holds(sync_memory: Memory, scope: ScopeArgs) -> None:
    """An import takes every item's lock before it writes them, held to its commit: one lock per item
    would outgrow PostgreSQL's shared lock table ("out of shared memory"); they are hashed into a
    bounded number per scope, as the facts' are (`reconcile_statements.LOCK_BUCKETS`)."""
    many = 20_000
    lines = [{"kind": "item", "namespace": ["bulk"], "key": f"k{n}", "value": {"n": n}} for n in range(many)]
    report = sync_memory.import_jsonl(io.StringIO(jsonl(lines)), **scope)
    assert report.items == many
    assert len(sync_memory.search_items(["bulk"], limit=10_000, **scope)) == 10_000


def test_the_cli_exports_and_imports_items(pg_dsn: str, sync_memory: Memory, scope: ScopeArgs, tmp_path: Path) -> None:
    sync_memory.put_items(NOTES[:2], **scope)
    path, copy = tmp_path / "memory.jsonl", f"{scope['project']}-copy"
    source = ["--dataset", scope["dataset"], "--project", scope["project"]]
    result = CliRunner().invoke(app, ["--dsn", pg_dsn, "export", str(path), *source], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    target = ["--dataset", scope["dataset"], "--project", copy]
    result = CliRunner().invoke(app, ["--dsn", pg_dsn, "import", str(path), *target], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert f"imported 1 facts, 0 episodes and 2 items into {scope['dataset']}/{copy}" in result.stdout
    restored = sync_memory.get_item(["notes"], "plain", dataset=scope["dataset"], project=copy)
    assert restored is not None and restored.value == NOTES[1]["value"]


@pytest.mark.parametrize("batch_size", [1, 500])
async def test_two_values_starting_together_are_a_line_the_import_names_or_skips(
    memory: Either, scope: ScopeArgs, batch_size: int
) -> None:
    """A store may hold two values of a relation starting at the same instant (written before it was
    declared single-valued; `maintain` leaves them). Its export imports into a scope holding the
    relation single-valued only without the second: by default an `ImportFormatError` names its
    line and nothing is written; `on_error="skip"` leaves it out, with the item line referring to
    it, reports both lines and imports the rest (in any batch: the batch is planned again)."""
    paris = {"subject": "user", "predicate": "lives in", "object": "paris", "valid_at": "2020-01-01"}
    await memory.add_facts([paris, {**paris, "object": "rome"}, FACTS[0]], **scope)
    await memory.set_single_valued(["lives in"], **scope)
    out = io.StringIO()
    await memory.export_jsonl(out, **scope)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["object"] for r in records] == ["paris", "rome", "tea"]
    item = {"kind": "item", "namespace": ["notes"], "key": "home", "value": {"n": 1}, "fact_id": records[1]["id"]}
    text = out.getvalue() + jsonl([item])
    copy: ScopeArgs = {**scope, "project": "copy"}
    await memory.set_single_valued(["lives in"], **copy)
    with pytest.raises(
        ImportFormatError, match=r"^line 2: cannot be placed: user lives in .* starting at 2020"
    ) as raised:
        await load(memory, text, copy, batch_size=batch_size)
    assert raised.value.line == 2
    assert await counts(memory, copy) == (0, 0)
    report = await load(memory, text, copy, batch_size=batch_size, on_error="skip")
    assert (report.facts, report.items, report.skipped) == (2, 0, 2)
    assert [n for n, _ in report.errors] == [2, 4] and "line 2 was skipped" in report.errors[1][1]
    assert (report.facts_new, report.facts_merged) == (2, 0)
    assert sorted(f.object for f in (await memory.list_facts(**copy, status="all")).facts) == ["paris", "tea"]
    assert await memory.get_item(["notes"], "home", **copy) is None
    again = await load(memory, text, scope, batch_size=batch_size)  # into the store it came from: all there
    assert (again.facts_new, again.facts_merged, again.skipped) == (0, 3, 0)


def test_an_export_reads_the_store_as_it_was_when_it_began(sync_memory: Memory, scope: ScopeArgs) -> None:
    """An export reads its facts (a page at a time), episodes and items in one snapshot. Read as the
    store is at each page, a value forgotten and another started at the same instant after the first
    page showed both values at once: a file whose import into a scope holding the relation
    single-valued fails (or loses the second with `on_error="skip"`), and a state the store never
    had. Now the export is the store as it was when it began, whatever is written meanwhile."""
    sync_memory.set_single_valued(["lives in"], **scope)
    paris = {
        "subject": "user",
        "predicate": "lives in",
        "object": "paris",
        "object_type": "PLACE",
        "valid_at": "2020-01-01",
    }
    sync_memory.add_facts([paris], **scope)
    dims = sync_memory.info.dimensions
    notes = [
        {"subject": "user", "predicate": "noted", "object": f"note {n}", "object_type": "LITERAL"} for n in range(1000)
    ]
    sync_memory.add_facts(notes, **scope, vectors=[[1.0] * dims] * len(notes))  # a second page of facts
    sync_memory.add_episodes([{"thread_id": "t1", "text": "Moved to Paris."}], **scope)

    class ChangesMidway(io.StringIO):
        def writelines(self, lines: Any) -> None:
            if not self.getvalue():  # the first page of facts
                sync_memory.forget(entity="paris", **scope)
                sync_memory.add_facts([{**paris, "object": "rome"}], **scope)
                sync_memory.add_episodes([{"thread_id": "t1", "text": "Moved to Rome."}], **scope)
                sync_memory.put_items([NOTES[0]], **scope)
            super().writelines(lines)

    out = ChangesMidway()
    assert sync_memory.export_jsonl(out, **scope) == 1002
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r.get("object") for r in records if r.get("predicate") == "lives in"] == ["paris"]
    assert [r["text"] for r in records if r["kind"] == "episode"] == ["Moved to Paris."]
    copy: ScopeArgs = {**scope, "project": "copy"}
    sync_memory.set_single_valued(["lives in"], **copy)
    report = sync_memory.import_jsonl(io.StringIO(out.getvalue()), **copy)
    assert (report.facts, report.episodes, report.items, report.skipped) == (1001, 1, 0, 0)
