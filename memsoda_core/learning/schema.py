"""The structured output an extractor returns, as JSON Schema derived from `FactInput`.

The fact's properties are `FactInput`'s own fields (their names, and their types read from the
dataclass), so a field added to the fact model reaches the extractor without a second definition;
only the one-line help per field lives here, and a test holds it to the fields.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from memsoda_core.models import FactInput

MODEL_FIELDS: dict[str, str] = {
    "subject": 'Who or what the fact is about; the speaking user is "{user}".',
    "predicate": 'The relation, a short verb phrase: "lives in", "works at", "prefers".',
    "object": "The value or the other entity.",
    "subject_type": "PERSON, ORGANIZATION, PLACE, PRODUCT, EVENT, CONCEPT or OTHER.",
    "object_type": "As subject_type; LITERAL when the object is a value (a date, number, phrase).",
    "mentions": "Other entities the fact names, if any.",
    "valid_at": "ISO-8601 date or datetime the fact became true, when the messages state or imply it; else null.",
    "invalid_at": "ISO-8601 date or datetime the fact stopped being true, when stated; else null.",
    "confidence": "0 to 1: how sure the messages make it (1 when stated plainly).",
    "source_quote": "The exact words of one message that state the fact, copied verbatim.",
}
"""The `FactInput` fields an extractor fills, with their help. Left out: `anchor` (memsoda derives
it) and `single_valued` (set by the store's registry: a model must not end facts it was not shown)."""

OPERATIONS = ("add", "supersede", "end")

SCHEMA_NAME = "memsoda_extraction"


def _json_type(field: dataclasses.Field[Any]) -> dict[str, Any]:
    annotation = str(field.type)
    if annotation.startswith("Sequence[str]"):
        return {"type": "array", "items": {"type": "string"}}
    if annotation == "float":
        return {"type": "number"}
    if annotation == "str":
        return {"type": "string"}
    return {"type": ["string", "null"]}  # `Any` and optional strings: ISO dates, quotes


def fact_schema(user: str = "user") -> dict[str, Any]:
    """JSON Schema of one fact: every field of `MODEL_FIELDS`, typed from `FactInput`."""
    fields = {field.name: field for field in dataclasses.fields(FactInput)}
    properties = {
        name: {**_json_type(fields[name]), "description": help_text.format(user=user)}
        for name, help_text in MODEL_FIELDS.items()
    }
    # Strict structured output (OpenAI) wants every property required and no others.
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def extraction_schema(user: str = "user") -> dict[str, Any]:
    """JSON Schema of an extractor's whole answer: the operations, and an optional summary."""
    operation = {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(OPERATIONS), "description": "What to do."},
            "fact_id": {
                "type": ["integer", "null"],
                "description": "For supersede and end: the id of a shown fact; else null.",
            },
            "fact": {
                "anyOf": [fact_schema(user), {"type": "null"}],
                "description": "For add and supersede: the new fact; else null.",
            },
            "ended_at": {
                "type": ["string", "null"],
                "description": "For end: ISO-8601 time the shown fact stopped being true, if known; else null.",
            },
            "source_quote": {
                "type": ["string", "null"],
                "description": "For end: the exact words of a message that say the fact no longer holds.",
            },
        },
        "required": ["op", "fact_id", "fact", "ended_at", "source_quote"],
        "additionalProperties": False,
    }
    return {
        "title": SCHEMA_NAME,
        "description": "Memory operations for the facts the messages state.",
        "type": "object",
        "properties": {
            "operations": {"type": "array", "items": operation},
            "summary": {
                "type": ["string", "null"],
                "description": "One or two sentences on what the window was about, when asked for; else null.",
            },
        },
        "required": ["operations", "summary"],
        "additionalProperties": False,
    }
