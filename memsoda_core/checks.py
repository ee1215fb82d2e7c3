"""Checks of scalar arguments (pure): True/False, an int in a range, a number. Each returns the value
or raises, with one message format: `{name} must be {what was expected}, got {what was given}`.

Which error is raised is the caller's: `ARGUMENT` at a call (`ArgumentTypeError` for a wrong type,
`LimitError` for a value out of range, both `ValidationError`), `CONFIGURATION` at open and for an
embedder's settings (`ConfigurationError` for both). A bool is never an int or a number here
(`True == 1` in Python), and a number is never NaN."""

from __future__ import annotations

import math
import reprlib
import sys
from typing import Any, Literal, NamedTuple, TypeGuard, overload

from memsoda_core.errors import ArgumentTypeError, ConfigurationError, LimitError, MemsodaError


class Errors(NamedTuple):
    """The errors a check raises: for a value of the wrong type, and for one out of range."""

    wrong_type: type[MemsodaError]
    out_of_range: type[MemsodaError]


ARGUMENT = Errors(ArgumentTypeError, LimitError)
"""A call's argument (README, "Errors")."""
CONFIGURATION = Errors(ConfigurationError, ConfigurationError)
"""An option of `Memory.open` or of an embedder."""


class _Shown(reprlib.Repr):
    """`repr` bounded in depth and length, and safe for any value: a huge integer is not converted
    (Python refuses to turn one of over 4,300 digits into text)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxstring = self.maxother = 80

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() <= 64:
            return repr(x)
        return f"<an integer of {x.bit_length()} bits>"


_SHOWN = _Shown()


def display(value: Any) -> str:
    """A value from outside (caller, file, model) as it may appear in an error message."""
    return _SHOWN.repr(value)


def is_int(value: Any) -> TypeGuard[int]:
    """Whether `value` is a Python int and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> TypeGuard[int | float]:
    """Whether `value` is an int or a float and not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


@overload
def check_bool(value: Any, name: str, *, or_none: Literal[False] = False, errors: Errors = ARGUMENT) -> bool: ...
@overload
def check_bool(value: Any, name: str, *, or_none: bool, errors: Errors = ARGUMENT) -> bool | None: ...
def check_bool(value: Any, name: str, *, or_none: bool = False, errors: Errors = ARGUMENT) -> bool | None:
    """`value` when it is True or False (or None, with `or_none`)."""
    if isinstance(value, bool) or (or_none and value is None):
        return value
    raise errors.wrong_type(f"{name} must be True{', False or None' if or_none else ' or False'}, got {display(value)}")


@overload
def check_int(
    value: Any,
    name: str,
    *,
    low: int | None = None,
    high: int | None = None,
    or_none: Literal[False] = False,
    errors: Errors = ARGUMENT,
) -> int: ...
@overload
def check_int(
    value: Any, name: str, *, low: int | None = None, high: int | None = None, or_none: bool, errors: Errors = ARGUMENT
) -> int | None: ...
def check_int(
    value: Any,
    name: str,
    *,
    low: int | None = None,
    high: int | None = None,
    or_none: bool = False,
    errors: Errors = ARGUMENT,
) -> int | None:
    """`value` when it is an int in `low..high` (each bound optional; or None, with `or_none`)."""
    if or_none and value is None:
        return None
    wanted = f"an int{_bounds(low, high)}{' or None' if or_none else ''}"
    if not is_int(value):
        raise errors.wrong_type(f"{name} must be {wanted}, got {display(value)}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise errors.out_of_range(f"{name} must be {wanted}, got {display(value)}")
    return value


def check_number(
    value: Any,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    positive: bool = False,
    finite: bool = True,
    unit: str = "",
    errors: Errors = ARGUMENT,
) -> float:
    """`value` (unconverted) when it is an int or float, not NaN, in `low..high` (each bound
    optional), above 0 with `positive`, finite unless `finite` is False (a timeout may be
    infinite), and, an int, one a float holds (it is used as one). `unit` names what it counts
    (`seconds`)."""
    wanted = f"a{' positive' if positive else ''} number{f' of {unit}' if unit else ''}{_bounds(low, high)}"
    if not is_number(value):
        raise errors.wrong_type(f"{name} must be {wanted}, got {display(value)}")
    # an integer is compared as it is, never converted (NaN fails all)
    inside = (low is None or value >= low) and (high is None or value <= high) and (not positive or value > 0)
    if not inside or value != value or (finite and isinstance(value, float) and not math.isfinite(value)):
        raise errors.out_of_range(f"{name} must be {wanted}, got {display(value)}")
    if is_int(value) and abs(value) > sys.float_info.max:  # it would overflow where used as a float
        raise errors.out_of_range(f"{name} must be {wanted} within a float's range, got {display(value)}")
    return value


def _bounds(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f" between {_shown(low)} and {_shown(high)}"
    if low is not None:
        return f" of at least {_shown(low)}"
    if high is not None:
        return f" of at most {_shown(high)}"
    return ""


def _shown(bound: float) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)
