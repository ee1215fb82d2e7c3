"""Which embedder a store is opened with: an explicit one, else `MEMSODA_EMBEDDER`, else the model
the store records, else (a new store) the environment's default; and the advice of a mismatch.

A choice is named by a spec string: `local` (the offline all-MiniLM-L6-v2), `openai` (the model in
`MEMSODA_OPENAI_MODEL`, default text-embedding-3-small) or `openai:MODEL`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from memsoda_core.embedders.local import DEFAULT_LOCAL_DIMENSIONS, DEFAULT_LOCAL_MODEL, LocalEmbedder
from memsoda_core.embedders.protocol import Embedder
from memsoda_core.errors import ConfigurationError, EmbedderMismatchError

EMBEDDER_ENV = "MEMSODA_EMBEDDER"
"""The environment variable that names the embedder (a spec), over the store's recorded model."""

DEFAULT_OPENAI_MODEL = "text-embedding-3-small"

Kind = Literal["local", "openai"]


@dataclass(frozen=True, kw_only=True)
class EmbedderSpec:
    """An embedder memsoda can build by itself: the offline model, or an OpenAI-compatible one."""

    kind: Kind
    model: str

    @property
    def text(self) -> str:
        """The spec string that names it (what `MEMSODA_EMBEDDER` and `--embedder` take)."""
        return "local" if self.kind == "local" else f"openai:{self.model}"


@dataclass(frozen=True, kw_only=True)
class RecordedSpace:
    """The model and dimension a store's meta table records."""

    model: str
    dimensions: int


@dataclass(frozen=True, kw_only=True)
class Origin:
    """Why an embedder was chosen, in the words of a mismatch's advice."""

    reason: str
    """Completes "..., but REASON, so the embedder is ...", e.g. "MEMSODA_EMBEDDER=openai is set"."""
    undo: str
    """What stops that choice, e.g. "unset MEMSODA_EMBEDDER"."""
    setting: str = f"set {EMBEDDER_ENV}="
    """Prefix of the advice naming the store's own model, e.g. "set MEMSODA_EMBEDDER=" + "local"."""


EXPLICIT = Origin(
    reason="an embedder was passed to open()",
    undo="open it without embedder= (memsoda then uses the store's model) or with an embedder of that model",
    setting="pass embedder=",
)


@dataclass(frozen=True, kw_only=True)
class Choice:
    """What to build (or the caller's own embedder), and why."""

    spec: EmbedderSpec | None
    """None for an embedder the caller passed."""
    origin: Origin
    dimensions: int | None = None
    """The store's recorded dimension when the spec is its model (no probe, no model load)."""


def parse_spec(text: str, *, source: str = EMBEDDER_ENV, environ: Mapping[str, str] = os.environ) -> EmbedderSpec:
    """`local`, `openai` or `openai:MODEL` -> an EmbedderSpec; ConfigurationError naming `source`."""
    kind, colon, model = text.strip().partition(":")
    kind, model = kind.strip().lower(), model.strip()
    if kind == "local" and not colon:
        return EmbedderSpec(kind="local", model=DEFAULT_LOCAL_MODEL)
    if kind == "openai" and not colon:
        return EmbedderSpec(kind="openai", model=environ.get("MEMSODA_OPENAI_MODEL") or DEFAULT_OPENAI_MODEL)
    if kind == "openai" and model:
        return EmbedderSpec(kind="openai", model=model)
    raise ConfigurationError(
        f"{source}={text!r} is not an embedder: use local, openai or openai:MODEL (e.g. openai:{DEFAULT_OPENAI_MODEL})"
    )


def _openai_configured(environ: Mapping[str, str]) -> str | None:
    """The variable that configures OpenAI embeddings (OPENAI_API_KEY or OPENAI_BASE_URL), if set."""
    return next((name for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL") if environ.get(name)), None)


def environment_default(environ: Mapping[str, str] = os.environ) -> tuple[EmbedderSpec, Origin]:
    """What a new store takes: `MEMSODA_EMBEDDER`, else OpenAI when configured, else the local model."""
    requested = environ.get(EMBEDDER_ENV)
    if requested:
        return parse_spec(requested, environ=environ), _env_origin(requested)
    configured = _openai_configured(environ)
    if configured:
        model = environ.get("MEMSODA_OPENAI_MODEL") or DEFAULT_OPENAI_MODEL
        return EmbedderSpec(kind="openai", model=model), Origin(
            reason=f"{configured} is set",
            undo=f"unset {configured}",
        )
    return EmbedderSpec(kind="local", model=DEFAULT_LOCAL_MODEL), Origin(
        reason="neither OPENAI_API_KEY nor OPENAI_BASE_URL is set",
        undo="set OPENAI_API_KEY",
    )


def _env_origin(requested: str) -> Origin:
    return Origin(reason=f"{EMBEDDER_ENV}={requested} is set", undo=f"unset {EMBEDDER_ENV}")


def option_origin(option: str, requested: str) -> Origin:
    """The origin of a command-line option naming the embedder (`--embedder openai`)."""
    return Origin(reason=f"{option} {requested} was given", undo=f"drop {option}", setting=f"use {option} ")


def recorded_spec(space: RecordedSpace, environ: Mapping[str, str] = os.environ) -> EmbedderSpec | None:
    """The spec that builds the store's model from what is installed and configured, or None: the
    offline model; a local model directory; an OpenAI model when OpenAI is configured (a known
    model, the one `MEMSODA_OPENAI_MODEL` names, or any model of an `OPENAI_BASE_URL` server)."""
    from memsoda_core.embedders.openai import KNOWN_DIMENSIONS

    if space.model == DEFAULT_LOCAL_MODEL:
        return EmbedderSpec(kind="local", model=DEFAULT_LOCAL_MODEL)
    if os.path.isdir(space.model):
        return EmbedderSpec(kind="local", model=space.model)
    if _openai_configured(environ) and (
        space.model in KNOWN_DIMENSIONS
        or space.model == environ.get("MEMSODA_OPENAI_MODEL")
        or environ.get("OPENAI_BASE_URL")
    ):
        return EmbedderSpec(kind="openai", model=space.model)
    return None


def choose(
    recorded: RecordedSpace | None,
    *,
    option: tuple[str, str] | None = None,
    environ: Mapping[str, str] = os.environ,
) -> Choice:
    """The embedder for a store when the caller passed none: `option` (a command-line option's
    name and spec, e.g. ("--embedder", "local")), else `MEMSODA_EMBEDDER`, else the store's
    recorded model, else the environment's default.

    Raises ConfigurationError for a bad spec, or when the store's model cannot be built here
    (saying how to)."""
    if option is not None:
        name, requested = option
        spec = parse_spec(requested, source=name, environ=environ)
        return Choice(spec=spec, origin=option_origin(name, requested), dimensions=_dimensions_of(spec, recorded))
    requested_ = environ.get(EMBEDDER_ENV)
    if requested_:
        spec = parse_spec(requested_, environ=environ)
        return Choice(spec=spec, origin=_env_origin(requested_), dimensions=_dimensions_of(spec, recorded))
    if recorded is None:
        spec, default_origin = environment_default(environ)
        return Choice(spec=spec, origin=default_origin)
    spec_ = recorded_spec(recorded, environ)
    if spec_ is None:
        raise ConfigurationError(
            f"this store holds {recorded.dimensions}-dimensional vectors of {recorded.model!r}, which memsoda "
            "cannot build here: for an OpenAI model set OPENAI_API_KEY (or OPENAI_BASE_URL for a compatible "
            "server), else pass embedder= an embedder of that model"
        )
    return Choice(spec=spec_, origin=Origin(reason="the store records it", undo=""), dimensions=recorded.dimensions)


def _dimensions_of(spec: EmbedderSpec, recorded: RecordedSpace | None) -> int | None:
    return recorded.dimensions if recorded is not None and recorded.model == spec.model else None


def build(spec: EmbedderSpec, *, dimensions: int | None = None) -> Embedder:
    """The embedder a spec names (the local model loads on first use; OpenAI needs its key or URL).
    `dimensions`, the store's recorded size, is sent to OpenAI only when it is not the model's own."""
    if spec.kind == "local":
        return LocalEmbedder() if spec.model == DEFAULT_LOCAL_MODEL else LocalEmbedder(spec.model)
    from memsoda_core.embedders.openai import KNOWN_DIMENSIONS, OpenAIEmbedder

    known = KNOWN_DIMENSIONS.get(spec.model)
    return OpenAIEmbedder(
        spec.model,
        dimensions=dimensions,
        base_url=os.environ.get("OPENAI_BASE_URL"),
        send_dimensions=dimensions is not None and known is not None and dimensions != known,
    )


def known_dimensions(spec: EmbedderSpec) -> int | None:
    """The spec's vector size when it is known without loading or asking the model."""
    from memsoda_core.embedders.openai import KNOWN_DIMENSIONS

    if spec.kind == "local":
        return DEFAULT_LOCAL_DIMENSIONS if spec.model == DEFAULT_LOCAL_MODEL else None
    return KNOWN_DIMENSIONS.get(spec.model)


def check_space(
    stored: RecordedSpace, model: str, dimensions: int, origin: Origin, environ: Mapping[str, str] = os.environ
) -> None:
    """Raise EmbedderMismatchError unless the embedder's model and dimension are the store's; the
    message names why that embedder was chosen and what to do instead."""
    if stored.model == model and stored.dimensions == dimensions:
        return
    fixes = [origin.undo] if origin.undo else []
    own = recorded_spec(stored, environ)
    if own is not None and origin is not EXPLICIT:
        fixes.append(f"{origin.setting}{own.text}")
    fixes.append("use another schema (schema=...) or MEMSODA_HOME for the new model")
    fixes.append(
        "move the store to the new model: open it with its own model and run `memsoda reembed --embedder SPEC` "
        "(Memory.reembed(embedder))"
    )
    raise EmbedderMismatchError(
        f"this store holds {stored.dimensions}-dimensional vectors of {stored.model!r}, but {origin.reason}, "
        f"so the embedder is {model!r} with {dimensions} dimensions; {', or '.join(fixes)}"
    )
