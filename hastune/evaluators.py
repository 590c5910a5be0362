"""The evaluator interface: what the tuner and the CLI ask of anything that measures a
deployment's goodput, and the registry of the ones hastune has.

- `sim` — the simulators (hastune.evaluate.Evaluation): fast, deterministic for a seed.
- `real` — the engine in runners/ with a real model (hastune.real.RealEvaluation); with an
  `engine` (vllm, sglang) the exported deployment on that engine, measured at its OpenAI
  endpoint (hastune.engines_real.OpenAIEvaluation).

Adding one is a class with these methods and one entry in EVALUATORS. The tuner never imports
an evaluator's internals: what a trial may run is the evaluator's `runnable`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from hastune.config import AnyConfig
from hastune.errors import InputError
from hastune.goodput import GoodputResult, Probe
from hastune.model_ref import ProfileSource, load_arch, precision_of, shipped_profile
from hastune.profile import Profile
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
    engine: str | None = None       # real: vllm or sglang instead of runners/ (engines_real)
    launch_cmd: str | None = None   # real on an engine: start this instead of the export
    dummy_weights: bool = False     # real on an engine: --load-format dummy


def resolve_profile(recipe: Recipe, quiet: bool = False) -> tuple[Profile, ProfileSource]:
    """The recipe's profile and where it came from: its `profile:` file or a shipped one
    (hastune.model_ref.shipped_profile), else one built from kernel tables on first use and
    cached (hastune.calibrate.ondemand; one stderr line says so unless `quiet`). The seam
    between the core, which never imports hastune.calibrate, and the builder."""
    path = shipped_profile(recipe)
    if path is not None:
        kind = "file" if recipe.profile else "shipped"
        return recipe.load_profile(), ProfileSource(kind, str(path), precision_of(recipe),
                                                    recipe.engine)
    from hastune.calibrate import ondemand
    from hastune.calibrate.aic import PACKAGE, package_version

    arch = load_arch(recipe)
    media = sorted(k for k, w in recipe.workload.mix.items() if k != "text" and w > 0)
    if arch.encoder is None and media:
        raise InputError(recipe.path, "workload.mix", f"{arch.name} is a text-only model (its "
                         f"config has no vision or audio encoder) but the mix sends "
                         f"{', '.join(media)} requests", "give a multimodal model's config "
                         "(e.g. Qwen2.5-VL, LLaVA-NeXT), or mix: {text: 1.0}")
    prec = precision_of(recipe, arch)
    req = ondemand.Request(arch, recipe.cluster.gpu, prec, recipe.engine)
    got = ondemand.ensure(req, recipe.path)
    prof = got.profile
    need = prof.min_pp * min(prof.tp_degrees)
    if need > recipe.cluster.gpus:  # larger than one node: it needs pipeline stages
        raise InputError(recipe.path, "cluster.gpus", f"{arch.name} ({prec.label}) does not "
                         f"fit on {recipe.cluster.gpus} {recipe.cluster.gpu}: its weights need "
                         f"tp {min(prof.tp_degrees)} × {prof.min_pp} pipeline stages, "
                         f"{need} GPUs", f"give cluster.gpus ≥ {need} (pp across nodes), "
                         "fp8 weights, or a GPU with more memory")
    src = ProfileSource("built" if got.built else "cache", str(got.path), prec, recipe.engine,
                        f"{PACKAGE} {package_version()}", got.seconds)
    if got.built and not quiet:
        print(f"hastune: built profile {got.profile.name} ({prec.label}, {recipe.engine.name} "
              f"kernels of {src.kernels}) in {got.seconds:.1f} s -> {got.path} (cached; "
              f"clear with: rm -r {got.path.parent})", file=sys.stderr, flush=True)
    return got.profile, src


def _sim(recipe: Recipe, o: EvaluatorOptions) -> Evaluator:
    if o.engine is not None or o.launch_cmd is not None:
        raise InputError(None, "--engine", "an engine's real trials are --evaluator real's",
                         "add --evaluator real, or drop --engine / --launch-cmd")
    if o.backend != "local" or o.ray_address:
        raise InputError(None, "--backend", "the backend is the engine's: it applies to "
                         "--evaluator real", "add --evaluator real, or drop --backend")
    from hastune.evaluate import Evaluation

    return Evaluation(recipe, requests=o.requests, seed=o.seed)


def _real(recipe: Recipe, o: EvaluatorOptions) -> Evaluator:
    if o.engine is not None:
        from hastune.engines_real import OpenAIEvaluation, OpenAIOptions

        return OpenAIEvaluation(recipe, OpenAIOptions(engine=o.engine, launch_cmd=o.launch_cmd,
                                                      dummy_weights=o.dummy_weights),
                                requests=o.requests, seed=o.seed)
    if o.launch_cmd is not None:
        raise InputError(None, "--launch-cmd", "a launch command replaces an engine's "
                         "launch", "add --engine vllm or --engine sglang")
    from hastune.real import RealEvaluation, RealOptions

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
