"""The store's pure parts, no database: the fact columns, the tenant predicate, the write rules."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import UTC, datetime
from typing import Any

import pytest

from memsoda_core import Fact
from memsoda_core.forgetting import deleting
from memsoda_core.layouts.write_form import WriteForm
from memsoda_core.store import lexemes, statements
from memsoda_core.store.fact_columns import FACT_COLUMNS, decode_fact, fact_columns, fact_from
from memsoda_core.store.tenant_index import tenant_predicate
from memsoda_core.writing import inserts
from memsoda_core.writing.counts import CountDeltas, keep_specific_type


def test_fact_columns_are_the_fields_of_fact_in_order() -> None:
    assert [column.name for column in FACT_COLUMNS] == [field.name for field in dataclasses.fields(Fact)]
    select = fact_columns("s").as_string(None)
    for column in FACT_COLUMNS:
        assert f' AS "{column.name}"' in select  # named, so rows can be read by name


def test_decode_fact_by_position_and_by_name_agree() -> None:
    when = datetime(2026, 1, 1, tzinfo=UTC)
    stored = {
        "id": 7,
        "dataset": "d",
        "project": "p",
        "subject": "ada",
        "predicate": "likes",
        "object": "tea",
        "object_type": "OTHER",
        "anchor": "ada",
        "anchor_type": "PERSON",
        "mentions": None,
        "valid_at": when,
        "invalid_at": None,
        "confidence": 0.8999999761581421,  # a real read back as float8
        "source_quote": None,
        "created_at": when,
        "superseded_by": None,
        "times_seen": 1,
        "expired_at": None,
    }
    fact = decode_fact(tuple(stored[column.name] for column in FACT_COLUMNS))
    assert fact == fact_from({**stored, "subject_type": "PERSON"})  # other columns are ignored
    assert (fact.mentions, fact.confidence) == ((), 0.9)
    row = statements.ExportedFact(subject_type="PERSON", **stored)
    assert (row.fact, row.subject_type) == (fact, "PERSON")


def test_an_exported_line_is_the_export_format_byte_for_byte() -> None:
    # the keys and their order come from the fact's columns (`fact_columns.EXPORTED_FIELDS`)
    from memsoda_core.ops.transfer import fact_record, jsonl_line

    when = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    stored: dict[str, Any] = {column.name: None for column in FACT_COLUMNS}
    stored |= {"id": 1, "subject": "Sam", "predicate": "likes", "object": "tea", "object_type": "OTHER"}
    stored |= {"anchor": "sam", "mentions": ["a"], "valid_at": when, "confidence": 0.75, "times_seen": 3}
    line = jsonl_line(fact_record(statements.ExportedFact(subject_type="PERSON", **stored)))
    assert line == (
        '{"kind": "fact", "id": 1, "subject": "Sam", "subject_type": "PERSON", "predicate": "likes", '
        '"object": "tea", "object_type": "OTHER", "mentions": ["a"], "anchor": "sam", '
        '"valid_at": "2024-01-02T03:04:05+00:00", "invalid_at": null, "confidence": 0.75, '
        '"source_quote": null, "times_seen": 3}\n'
    )
    from memsoda_core.models import FactInput
    from memsoda_core.store.fact_columns import EXPORTED_FIELDS

    # what is exported is read back: a fact's input field, or the id and count the import takes apart
    assert set(EXPORTED_FIELDS) - {"id", "times_seen"} <= {f.name for f in dataclasses.fields(FactInput)}


def test_the_tenant_predicate_is_written_once() -> None:
    assert tenant_predicate("f").as_string(None) == "f.dataset = %(dataset)s AND f.project = %(project)s"
    for module in (statements, lexemes):
        assert "dataset = %(dataset)s AND" not in inspect.getsource(module)
    text = deleting.delete_facts("s", statements.entity_facts("s")).as_string(None)
    assert text.count("dataset = %(dataset)s AND") == 9 and "{" not in text


def test_a_specific_type_wins_over_other_and_the_first_is_kept() -> None:
    types: dict[str, str] = {}
    keep_specific_type(types, "ada", "OTHER")
    assert types == {"ada": "OTHER"}  # recorded, so the name is counted
    keep_specific_type(types, "ada", "PERSON")
    keep_specific_type(types, "ada", "ORG")
    assert types == {"ada": "PERSON"}
    deltas = CountDeltas(types={"ada": "OTHER", "bob": "PERSON"})
    deltas.add(CountDeltas(types={"ada": "PERSON", "bob": "ORG", "cy": "OTHER"}))
    assert deltas.types == {"ada": "PERSON", "bob": "PERSON", "cy": "OTHER"}


def test_every_lexeme_count_uses_one_definition() -> None:
    definition = lexemes.fact_lexemes("f").as_string(None)
    assert definition == "tsvector_to_array(f.tsv)"
    assert definition in lexemes.recount_lexemes("s", scoped=False).as_string(None)
    assert "tsvector_to_array(tsv) AS lexemes" in inserts.FACTS.statement("s", WriteForm.ARRAYS).as_string(None)
    assert "tsvector_to_array(g.tsv)" in deleting.delete_facts("s", statements.entity_facts("s")).as_string(None)


def test_the_layout_registry_chooses_a_new_stores_layout_and_refuses_partitioned_on_citus() -> None:
    from memsoda_core.errors import ConfigurationError
    from memsoda_core.layouts import REGISTRY, new_store_layout

    assert (new_store_layout(None, citus=False).name, new_store_layout(None, citus=True).name) == (
        "partitioned",
        "plain",
    )
    assert new_store_layout("plain", citus=False) is REGISTRY["plain"]
    with pytest.raises(ConfigurationError, match="the partitioned layout is not for a Citus database"):
        new_store_layout("partitioned", citus=True)
    analyzed = [s.as_string(None) for s in REGISTRY["partitioned"].analyze_statements("m")]
    assert analyzed[:3] == [
        'ANALYZE "m"."facts_shared"',
        'ANALYZE "m"."entities_shared"',
        'ANALYZE "m"."fact_entities_shared"',
    ]
