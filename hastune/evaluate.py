"""Evaluate deployments of a recipe: one run at a rate, or the goodput search.

This is the library entry point the CLI (and the tuner) call.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hastune.config import EPDConfig, EPDStaticConfig
from hastune.errors import InputError
from hastune.goodput import GoodputResult, Probe, search_goodput
from hastune.profile import Profile
from hastune.recipe import Recipe
from hastune.sim import Simulator, make_simulator
from hastune.sim.result import RunResult
from hastune.workload import RequestSet, sample_requests


class Evaluation:
    """A recipe bound to its profile and request set (sampled once: common random numbers)."""

    def __init__(self, recipe: Recipe, profile: Profile | None = None,
                 requests: int | None = None, seed: int | None = None):
        self.recipe = recipe
        self.profile = profile or recipe.load_profile()
        self.seed = recipe.seed if seed is None else seed
        self.requests: RequestSet = sample_requests(
            recipe.workload, requests, self.seed, base=recipe.base_dir)

    def check(self, config: EPDConfig | EPDStaticConfig, config_path: str | Path | None = None
              ) -> None:
        if config.architecture not in self.recipe.architectures:
            pass  # evaluating another architecture than the recipe tunes is allowed
        if config.gpus > self.recipe.cluster.gpus:
            raise InputError(config_path, None,
                             f"the config uses {config.gpus} GPUs (n_E + n_P + n_D) but the "
                             f"recipe's budget cluster.gpus is {self.recipe.cluster.gpus}",
                             "lower n_E/n_P/n_D or raise cluster.gpus in the recipe")

    def simulator(self, config: EPDConfig | EPDStaticConfig,
                  config_path: str | Path | None = None) -> Simulator:
        self.check(config, config_path)
        return make_simulator(self.profile, self.recipe.cluster, config,
                              warmup=self.recipe.workload.warmup)

    def run(self, config: EPDConfig | EPDStaticConfig, rate: float,
            config_path: str | Path | None = None) -> RunResult:
        if rate <= 0:
            raise InputError(None, "--rate", f"rate must be > 0 (got {rate})",
                             "give an arrival rate in requests per second")
        return self.simulator(config, config_path).run(self.requests, rate)

    def goodput(self, config: EPDConfig | EPDStaticConfig,
                config_path: str | Path | None = None,
                on_probe: Callable[[Probe], None] | None = None) -> GoodputResult:
        sim = self.simulator(config, config_path)
        ev = self.recipe.evaluator
        start = ev.start_rate or self.start_rate(config)
        return search_goodput(lambda r: sim.run(self.requests, r), self.recipe.slo,
                              start_rate=start, tolerance=ev.tolerance,
                              max_probes=ev.max_probes, on_probe=on_probe)

    def start_rate(self, config: EPDConfig | EPDStaticConfig) -> float:
        """A first guess near the decode pool's capacity, so the bracket takes few probes."""
        prof = self.profile
        reqs = self.requests
        ctx = float((reqs.prefill_tokens + reqs.output_tokens / 2).mean())
        out = float(reqs.output_tokens.mean())
        slots = max(1.0, min(prof.decode.max_batch,
                             prof.memory.kv_capacity_tokens() / max(ctx + out / 2, 1.0)))
        step = prof.decode.step(int(slots), slots * ctx)
        per_gpu = slots / max(step * max(out - 1, 1.0), 1e-9)
        return max(0.01, round(0.5 * per_gpu * config.n_D, 3))
