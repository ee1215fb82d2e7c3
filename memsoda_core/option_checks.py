"""The checks a group of recall options runs when it is made (pure). Each signal module declares its
own group (`recall.signals.anchor.AnchorOptions`, ...) and `options.RecallOptions` holds one of each:
this module imports nothing of recall, so a signal can check its knobs without an import cycle."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from memsoda_core.checks import check_bool, check_int, check_number
from memsoda_core.errors import ArgumentTypeError, LimitError

MAX_OPTION_INT = 2**31 - 1
"""Every option's bound: PostgreSQL's integer."""


def qualified(group: str, name: str) -> str:
    """An option's one name: `anchor.hops` for a group's knob, `rrf_k` for a cross-cutting one."""
    return f"{group}.{name}" if group else name


def check_types(options: Any, group: str = "") -> None:
    """Every scalar field of the dataclass `options` holds its annotated type (`bool`, `int`, `float`,
    or one of them `| None`): ArgumentTypeError otherwise. A float is never NaN and an integer fits
    PostgreSQL's (it is bound as one, or becomes a float): LimitError otherwise. Fields whose type
    is another options group are left to that group's own checks."""
    for f in fields(options):
        value = getattr(options, f.name)
        name = qualified(group, f.name)
        kind = str(f.type)
        if value is None and "None" in kind:
            continue
        if kind in ("bool", "<class 'bool'>"):
            check_bool(value, name)
        elif kind.startswith(("int", "<class 'int'>")):
            check_int(value, name, low=-MAX_OPTION_INT, high=MAX_OPTION_INT)
        elif kind.startswith(("float", "<class 'float'>")):
            # infinite is allowed (`min_relevance`, `embed_timeout_s`); each range is checked after
            check_number(value, name, finite=False)
            if isinstance(value, int) and abs(value) > MAX_OPTION_INT:
                raise LimitError(f"{name} is out of range (an integer beyond ±{MAX_OPTION_INT})")


def check_between(name: str, value: float | None, low: float, high: float, note: str = "") -> None:
    """LimitError unless `low <= value <= high` (None passes: left to the memory)."""
    if value is not None and not low <= value <= high:
        raise LimitError(f"{name} must be between {low:g} and {high:g}{note}, got {value}")


def check_share(name: str, value: float) -> None:
    """LimitError unless `value` is a share in (0, 1]."""
    if not 0.0 < value <= 1.0:
        raise LimitError(f"{name} must be in (0, 1], got {value}")


def check_cosine(name: str, value: float | None) -> None:
    """LimitError unless `value` is a cosine similarity (None passes: no floor)."""
    if value is not None and not -1.0 <= value <= 1.0:
        raise LimitError(f"{name} must be a cosine similarity in -1..1, got {value}")


def check_not_negative(name: str, value: int) -> None:
    if value < 0:
        raise LimitError(f"{name} must not be negative, got {value}")


def check_options_type(options: Any, cls: type, where: str) -> None:
    """`options` is None or an instance of `cls` (`RecallOptions`): a dict of overrides is refused
    here, with how to make one, rather than failing at its first use."""
    if options is not None and not isinstance(options, cls):
        raise ArgumentTypeError(
            f"{where} options must be a {cls.__name__} or None, got {type(options).__name__}"
            " (for overrides: DEFAULT_OPTIONS.with_overrides({...}), or recall's keyword arguments)"
        )
