"""The one place pipeline stages are registered and found by name.

A stage is a function ``run(state) -> detail`` that reads and rewrites ``state.cands``; it is
registered with ``@stage("name")`` in its own module. Profiles (``PipelineSettings.profiles``) list
stage names, so a new stage is one module plus its registration, and a new profile is
configuration only.

    @stage("graph", needs_score=True)
    def graph(state: State) -> str:
        ...
        state.cands.columns["graph"] = scores   # a column of its own, carried by take()/extend()
        return "hops=2"
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from teleo_server.errors import InvalidArgument
from teleo_server.pipeline.state import State

# modules whose stages are built in; each registers its stages when imported
_BUILTIN_MODULES = ("analyze", "recall", "fusion", "alignment", "rerank", "finalize", "route", "strategies", "validate",
                    "conflicts")


@dataclass(frozen=True, slots=True)
class Stage:
    """A registered stage.

    run: does the stage's work; returns a one-line detail for the stage event ("skipped: ..." when
    it could not run). on_disabled: what a request's ``disable_stages`` leaves in its place (e.g. a
    content score when fusion is skipped). needs_score: the candidates must carry a score first.
    prefetch: work of the stage that needs no earlier stage (the dense ANN search reads only the
    query, its mask and settings no stage changes): given the state before any stage runs, it
    returns a call (or None), which the retriever starts on a second thread so that it runs while
    the stages before this one do (``PipelineSettings.prefetch``); ``run`` takes its result with
    ``state.prefetched(name)``, None when nothing was started.
    together: such work that retrievals run one after another can share (a device scan that reads
    its rows once for several queries): given the states of a group of retrievals before any
    stage runs (``Retriever.retrieve_together``), it does the work of those it can at once and
    leaves each one's result where ``state.prefetched(name)`` finds it; a retrieval it leaves out
    is served as usual.
    """

    name: str
    run: Callable[[State], str]
    on_disabled: Callable[[State], None] | None = None
    needs_score: bool = False
    prefetch: Callable[[State], Callable[[], Any] | None] | None = None
    together: Callable[[list[State]], None] | None = None


_STAGES: dict[str, Stage] = {}
_discovered = False


def stage(name: str, *, on_disabled: Callable[[State], None] | None = None, needs_score: bool = False,
          prefetch: Callable[[State], Callable[[], Any] | None] | None = None,
          together: Callable[[list[State]], None] | None = None,
          ) -> Callable[[Callable[[State], str]], Callable[[State], str]]:
    """Register ``fn`` as the stage ``name``."""

    def register(fn: Callable[[State], str]) -> Callable[[State], str]:
        if not name or name in _STAGES:
            raise ValueError(f"stage name {name!r} is empty or registered twice")
        _STAGES[name] = Stage(name, fn, on_disabled, needs_score, prefetch, together)
        return fn

    return register


def unregister(name: str) -> None:
    """Remove a stage (for plugins and tests)."""
    _STAGES.pop(name, None)


def _discover() -> None:
    global _discovered
    if not _discovered:
        for module in _BUILTIN_MODULES:
            importlib.import_module(f"teleo_server.pipeline.{module}")
        _discovered = True


def stages() -> dict[str, Stage]:
    """Every registered stage by name."""
    _discover()
    return dict(_STAGES)


def get_stage(name: str, field: str = "stage") -> Stage:
    found = stages().get(name)
    if found is None:
        raise InvalidArgument(f"unknown stage {name!r}; expected one of {sorted(_STAGES)}", field=field)
    return found


__all__ = ["Stage", "get_stage", "stage", "stages", "unregister"]
