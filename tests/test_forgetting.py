"""Forgetting by source (`forget_source`) and by age (`set_retention`, `apply_retention`,
`maintain`) through the public API against the real server, with a scripted extractor."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from memsoda_core import ForgetReport, Memory, NotFoundError, RetentionRule, ScopeArgs, ValidationError
from memsoda_core.cli import app
from tests.conftest import Either
from tests.scripted_extractor import ScriptedExtractor, add, answer, supersede


def window(text: str, message_id: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text, "id": message_id}]


async def remember(
    memory: Either, scope: ScopeArgs, thread: str, text: str, mid: str, *ops: dict[str, Any], related: int = 0
) -> list[int]:
    extractor = ScriptedExtractor(answer(*ops, summary=f"summary of {thread}"))
    result = await memory.remember(
        window(text, mid), **scope, thread_id=thread, extractor=extractor, related=related, summarize=True
    )
    assert not result.rejected
    return list(result.added)


async def test_forgetting_a_thread_keeps_the_fact_another_thread_taught(memory: Either, scope: ScopeArgs) -> None:
    philips = add("user", "works at", "philips", "I work at Philips", object_type="ORGANIZATION")
    (shared, cat) = await remember(
        memory,
        scope,
        "t1",
        "I work at Philips and I have a cat",
        "m1",
        philips,
        add("user", "has", "cat", "I have a cat"),
    )
    (again, dog) = await remember(
        memory, scope, "t2", "I work at Philips, my dog is Rex", "m9", philips, add("user", "has", "dog", "my dog")
    )
    assert again == shared
    report = await memory.forget_source(**scope, thread_id="t1")
    assert report == ForgetReport(facts_deleted=1, facts_kept=1, episodes=1, items=0)
    with pytest.raises(NotFoundError):
        await memory.get_fact(cat, **scope)
    assert [(s.thread_id, s.message_id) for s in await memory.sources(shared, **scope)] == [("t2", "m9")]
    assert (await memory.get_fact(dog, **scope)).object == "dog"
    recalled = await memory.recall("summary", **scope, include=["episodes"])
    assert [e.thread_id for e in recalled.episodes] == ["t2"]
    assert "cat" not in (await memory.recall("what pets does the user have?", **scope)).context
    (stats,) = await memory.stats(**scope)
    assert stats["facts"] == 2
    # nothing left of t1: forgetting it again changes nothing
    assert await memory.forget_source(**scope, thread_id="t1") == ForgetReport(
        facts_deleted=0, facts_kept=0, episodes=0, items=0
    )


async def test_forgetting_messages_leaves_the_rest_of_the_thread(memory: Either, scope: ScopeArgs) -> None:
    extractor = ScriptedExtractor(
        answer(add("user", "likes", "tea", "I like tea"), add("user", "likes", "chess", "I play chess"))
    )
    messages = [
        {"role": "user", "content": "I like tea", "id": "a"},
        {"role": "user", "content": "I play chess", "id": "b"},
    ]
    result = await memory.remember(messages, **scope, thread_id="t", extractor=extractor, related=0, summarize=False)
    tea, chess = result.added
    report = await memory.forget_source(**scope, thread_id="t", message_ids=["a"])
    assert report == ForgetReport(facts_deleted=1, facts_kept=0, episodes=0, items=0)
    with pytest.raises(NotFoundError):
        await memory.get_fact(tea, **scope)
    assert (await memory.get_fact(chess, **scope)).object == "chess"
    # message ids without a thread match in any thread
    assert (await memory.forget_source(**scope, message_ids=["b"])).facts_deleted == 1


async def test_a_forgotten_successor_leaves_its_predecessor_as_history(memory: Either, scope: ScopeArgs) -> None:
    (old,) = await memory.add_facts([{"subject": "user", "predicate": "lives in", "object": "utrecht"}], **scope)
    (new,) = await remember(
        memory,
        scope,
        "t",
        "I moved to Delft",
        "m",
        supersede(old, "user", "lives in", "delft", "I moved to Delft"),
        related=20,
    )
    assert (await memory.get_fact(old, **scope)).superseded_by == new
    await memory.forget_source(**scope, thread_id="t")
    kept = await memory.get_fact(old, **scope)
    assert kept.superseded_by is None and kept.invalid_at is not None  # still ended: history, no dangling pointer
    assert [f.id for f in await memory.history(old, **scope)] == [old]


async def test_an_item_over_a_forgotten_fact_goes_with_it(memory: Either, scope: ScopeArgs) -> None:
    (fact_id,) = await memory.put_items(
        [{"namespace": ["notes"], "key": "k", "value": {"t": 1}, "text": "tea"}], **scope
    )
    assert fact_id is not None
    noted = add("user", "noted", "tea", "tea", object_type="LITERAL")
    (same,) = await remember(memory, scope, "t", "tea", "m", noted)
    assert same == fact_id
    report = await memory.forget_source(**scope, thread_id="t")
    assert (report.facts_deleted, report.items) == (1, 1)
    assert await memory.get_item(["notes"], "k", **scope) is None


async def test_forget_source_checks_its_arguments(memory: Either, scope: ScopeArgs) -> None:
    bad: dict[str, Any]
    for bad in ({}, {"thread_id": ""}, {"message_ids": "m1"}, {"message_ids": []}, {"message_ids": [1]}):
        with pytest.raises(ValidationError):
            await memory.forget_source(**scope, **bad)


LIVE = {"subject": "user", "predicate": "likes", "object": "tea"}
OTHER = {"subject": "user", "predicate": "owns", "object": "a bike"}
ENDED = {
    "subject": "user",
    "predicate": "lived in",
    "object": "delft",
    "valid_at": "2019-01-01",
    "invalid_at": "2020-01-01",
}


async def test_retention_purges_ended_facts_only_or_all_facts(memory: Either, scope: ScopeArgs) -> None:
    live, other, ended = await memory.add_facts([LIVE, OTHER, ENDED], **scope)
    now = datetime.now(UTC)
    rules = await memory.set_retention(**scope, max_age=timedelta(days=30))
    assert rules == [RetentionRule(predicate=None, max_age=timedelta(days=30), purge="ended")]
    # ended in 2020, but memory learned it just now: not yet 30 days known ended
    assert (await memory.apply_retention(at=now + timedelta(days=29))).facts == 0
    report = await memory.apply_retention(at=now + timedelta(days=31))
    assert (report.facts, report.scopes) == (1, ((scope["dataset"], scope["project"], 1),))
    with pytest.raises(NotFoundError):
        await memory.get_fact(ended, **scope)
    assert {f.id for f in (await memory.list_facts(**scope)).facts} == {live, other}
    # all facts, with a longer age for one predicate: the specific rule wins for it
    await memory.set_retention(**scope, max_age=timedelta(days=30), purge="all")
    await memory.set_retention(**scope, max_age=timedelta(days=365), purge="all", predicate="  LIKES ")
    assert [(r.predicate, r.max_age.days, r.purge) for r in await memory.retention(**scope)] == [
        (None, 30, "all"),
        ("likes", 365, "all"),
    ]
    assert (await memory.apply_retention(at=now + timedelta(days=31))).facts == 1
    assert [f.id for f in (await memory.list_facts(**scope, status="all")).facts] == [live]
    await memory.set_retention(**scope, max_age=None, predicate="likes")  # removed: the scope's rule applies
    assert (await memory.apply_retention(at=now + timedelta(days=31))).facts == 1
    assert (await memory.list_facts(**scope, status="all")).facts == ()
    (stats,) = await memory.stats(**scope)
    assert (stats["facts"], stats["entities"]) == (0, 0)


async def test_maintain_applies_retention(memory: Either, scope: ScopeArgs) -> None:
    live, ended = await memory.add_facts([LIVE, ENDED], **scope)
    await memory.set_retention(**scope, max_age=timedelta(microseconds=1))
    await memory.maintain(retention=False)
    assert (await memory.get_fact(ended, **scope)).object == "delft"
    await memory.maintain()  # its transaction starts after the write's: the end is known for longer than 1 µs
    with pytest.raises(NotFoundError):
        await memory.get_fact(ended, **scope)
    assert (await memory.get_fact(live, **scope)).object == "tea"


async def test_retention_checks_its_arguments(memory: Either, scope: ScopeArgs) -> None:
    for bad in (
        {"max_age": 30},
        {"max_age": timedelta(0)},
        {"max_age": timedelta(days=1), "purge": "live"},
        {"max_age": timedelta(days=1), "predicate": " "},
    ):
        with pytest.raises(ValidationError):
            await memory.set_retention(**scope, **bad)
    with pytest.raises(ValidationError):
        await memory.maintain(retention="yes")
    assert await memory.retention(**scope) == []


def test_the_cli_forgets_a_thread_and_sets_and_applies_retention(
    sync_memory: Memory, scope: ScopeArgs, pg_dsn: str
) -> None:
    extractor = ScriptedExtractor(answer(add("user", "has", "cat", "I have a cat")))
    (cat,) = sync_memory.remember(window("I have a cat", "m1"), **scope, thread_id="t1", extractor=extractor).added
    (ended,) = sync_memory.add_facts([ENDED], **scope)
    where = ["--dataset", scope["dataset"], "--project", scope["project"]]

    def cli(*args: str) -> Any:
        result = CliRunner().invoke(app, ["--dsn", pg_dsn, *args], env={"COLUMNS": "200", "NO_COLOR": "1"})
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    assert cli("forget-source", *where, "--thread", "t1", "--yes", "--json") == {
        "facts_deleted": 1,
        "facts_kept": 0,
        "episodes": 0,
        "items": 0,
    }
    with pytest.raises(NotFoundError):
        sync_memory.get_fact(cat, **scope)
    assert cli("retention", *where, "--max-age-days", "0.000001", "--json") == [
        {"predicate": "*", "max_age_days": pytest.approx(0.000001), "purge": "ended"}
    ]
    assert cli("maintain", "--json")["purged"]["facts"] >= 1  # other tests' scopes may have rules too
    with pytest.raises(NotFoundError):
        sync_memory.get_fact(ended, **scope)
    assert cli("retention", *where, "--remove", "--json") == []


@pytest.mark.parametrize("days", ["nan", "inf", "1e308"])
def test_the_cli_refuses_a_retention_age_no_timedelta_holds(scope: ScopeArgs, pg_dsn: str, days: str) -> None:
    where = ["--dataset", scope["dataset"], "--project", scope["project"]]
    result = CliRunner().invoke(
        app, ["--dsn", pg_dsn, "retention", *where, "--max-age-days", days], env={"COLUMNS": "200", "NO_COLOR": "1"}
    )
    assert result.exit_code == 2 and "--max-age-days" in result.output and "Traceback" not in result.output
    assert "must be a number of days up to" in result.output


def test_the_source_selection_and_its_sql_without_a_database() -> None:
    from psycopg import sql

    from memsoda_core.forgetting import deleting
    from memsoda_core.forgetting.rules import check_source
    from memsoda_core.learning import sources

    chosen = check_source("t", ["b", "a", "b"])
    assert chosen.message_ids == ("a", "b") and chosen.shape == {"thread": True, "messages": True}
    assert check_source(None, ["m"]).shape == {"thread": False, "messages": True}
    text = sources.only_sourced_facts("memsoda", thread=True, messages=False).as_string(None)
    assert "fs.thread_id = %(thread_id)s" in text and "message_id" not in text
    with pytest.raises(ValueError, match="thread or message"):
        sources.only_sourced_facts("memsoda", thread=False, messages=False)
    doomed = sql.SQL("SELECT 1 AS fact_id")
    deleted = deleting.delete_facts("memsoda", doomed).as_string(None)
    assert "SET superseded_by = NULL" in deleted and "p.id NOT IN (SELECT fact_id FROM doomed)" in deleted
