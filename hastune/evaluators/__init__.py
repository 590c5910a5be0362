"""The evaluator interface: what the tuner and the CLI ask of anything that measures a
deployment's goodput, and the registry of the ones hastune has.

- `sim` — the simulators (hastune.evaluators.sim.Evaluation): fast, deterministic for a
  seed.
- `real` — the engine in runners/ with a real model
  (hastune.evaluators.engine.RealEvaluation); with an `engine` (vllm, sglang) the exported
  deployment on that engine, measured at its OpenAI endpoint
  (hastune.evaluators.openai.OpenAIEvaluation).

The recipe's profile, found or built, is hastune.evaluators.profile's.

Adding one is a class with these methods and one entry in EVALUATORS. The tuner never imports
an evaluator's internals: what a trial may run is the evaluator's `runnable`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from hastune.config import AnyConfig
from hastune.errors import InputError
from hastune.goodput import GoodputResult, Probe
from hastune.recipe import Recipe
from hastune.runs import RunResult


@runtime_checkable
class Evaluator(Protocol):
    name: str        # its registry name ("sim", "real"), recorded with results
    recipe: Recipe
    seed: int

    def check(self, config: AnyConfig, config_path: str | Path | None = None) -> None:
        """InputError (file, field, fix) for a config it cannot evaluate."""

    def runnable(self, config: AnyConfig) -> bool:
        """Whether it can evaluate `config` (check without the message)."""

    def run(self, config: AnyConfig, rate: float,
            config_path: str | Path | None = None) -> RunResult:
        """One probe at `rate`, with its stability verdict."""

    def goodput(self, config: AnyConfig, config_path: str | Path | None = None,
                on_probe: Callable[[Probe], None] | None = None,
                incumbent: float | None = None, early_stop: bool = False) -> GoodputResult:
        """The goodput search of `config`."""

    def describe(self) -> dict[str, Any]:
        """What a result should record about how it was measured (beyond name and seed)."""

    def caveats(self, config: AnyConfig, rate_rps: float,
                run: RunResult | None = None) -> list[str]:
        """What a result of `config` at `rate_rps` (and its `run`) lies beyond: the
        simulator's (hastune.caveats); none for a measured one."""

    def close(self) -> None:
        """Release what it holds (engines, workers)."""


@dataclass
class EvaluatorOptions:
    """What the CLI can set on any evaluator (each ignores what does not apply)."""

    requests: int | None = None     # requests per probe (the sim: workload.requests override)
    seed: int | None = None         # override the recipe's seed
    backend: str = "local"          # real: where the engine's workers run
    ray_address: str | None = None  # real: the Ray cluster to join
    oversubscribe: bool = False     # real: run a deployment needing more devices than here
    engine: str | None = None       # real: vllm or sglang instead of runners/ (evaluators.openai)
    launch_cmd: str | None = None   # real on an engine: start this instead of the export
    dummy_weights: bool = False     # real on an engine: --load-format dummy


def _sim(recipe: Recipe, o: EvaluatorOptions) -> Evaluator:
    if o.engine is not None or o.launch_cmd is not None:
        raise InputError(None, "--engine", "an engine's real trials are --evaluator real's",
                         "add --evaluator real, or drop --engine / --launch-cmd")
    if o.backend != "local" or o.ray_address:
        raise InputError(None, "--backend", "the backend is the engine's: it applies to "
                         "--evaluator real", "add --evaluator real, or drop --backend")
    from hastune.evaluators.sim import Evaluation

    return Evaluation(recipe, requests=o.requests, seed=o.seed)


def _real(recipe: Recipe, o: EvaluatorOptions) -> Evaluator:
    if o.engine is not None:
        from hastune.evaluators.openai import OpenAIEvaluation, OpenAIOptions

        return OpenAIEvaluation(recipe, OpenAIOptions(engine=o.engine, launch_cmd=o.launch_cmd,
                                                      dummy_weights=o.dummy_weights),
                                requests=o.requests, seed=o.seed)
    if o.launch_cmd is not None:
        raise InputError(None, "--launch-cmd", "a launch command replaces an engine's "
                         "launch", "add --engine vllm or --engine sglang")
    from hastune.evaluators.engine import RealEvaluation, RealOptions

    return RealEvaluation(recipe, RealOptions(backend=o.backend, ray_address=o.ray_address,
                                              oversubscribe=o.oversubscribe),
                          requests=o.requests, seed=o.seed)


# name → factory(recipe, options). Adding an evaluator is one entry.
EVALUATORS: dict[str, Callable[[Recipe, EvaluatorOptions], Evaluator]] = {
    "sim": _sim,
    "real": _real,
}


def make_evaluator(name: str, recipe: Recipe,
                   options: EvaluatorOptions | None = None) -> Evaluator:
    """The evaluator called `name` for `recipe`; InputError naming the known ones."""
    if name not in EVALUATORS:
        raise InputError(None, "--evaluator", f"unknown evaluator {name!r}",
                         f"use one of {', '.join(EVALUATORS)}")
    return EVALUATORS[name](recipe, options or EvaluatorOptions())
