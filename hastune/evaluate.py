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
    """A recipe bound to its profile and request set (common random numbers).

    A probe at rate Λ simulates max(N, Λ·min_span·W0) requests, N = workload.requests and W0 the
    mean zero-load lifetime of a request (first arrival to last token): a run much shorter than
    one request's decode never fills the decode pool, and would pass rates it cannot sustain.
    Longer runs extend shorter ones (the request set is prefix-consistent)."""

    def __init__(self, recipe: Recipe, profile: Profile | None = None,
                 requests: int | None = None, seed: int | None = None):
        self.recipe = recipe
        self.profile = profile or recipe.load_profile()
        if self.profile.tp != 1:
            # epd / epd-static place one worker per GPU; TP groups come with the PaDG work
            raise InputError(self.profile.path, "tp",
                             f"the profile describes a tensor-parallel group of "
                             f"{self.profile.tp} GPUs, but epd and epd-static workers run on "
                             "one GPU each", "use a GPU whose memory holds the model (a profile "
                             "with tp: 1), e.g. a 80 GB or 141 GB card")
        self.seed = recipe.seed if seed is None else seed
        self.base_requests = requests or recipe.workload.requests
        self._pool: RequestSet = sample_requests(
            recipe.workload, self.base_requests, self.seed, base=recipe.base_dir)
        self.lifetime_s = self._zero_load_lifetime()

    @property
    def requests(self) -> RequestSet:
        """The base request set (workload.requests or the override)."""
        return self._pool.head(self.base_requests)

    def _zero_load_lifetime(self) -> float:
        r, p = self._pool, self.profile
        L = r.prefill_tokens
        tok = r.encoder_tokens
        enc = (tok > 0) * p.encode.latency(1, tok, tok * tok)  # type: ignore[arg-type]
        ttft = enc + p.prefill.latency(L, L * L)  # type: ignore[arg-type]
        steps = (r.output_tokens - 1) * p.decode.step(1, L + r.output_tokens / 2)  # type: ignore
        return float((ttft + steps).mean())

    def requests_at(self, rate: float) -> RequestSet:
        ev = self.recipe.evaluator
        n = max(self.base_requests, int(rate * ev.min_span * self.lifetime_s) + 1)
        n = min(n, max(ev.max_requests, self.base_requests))
        if n > len(self._pool):
            self._pool = sample_requests(self.recipe.workload, n, self.seed,
                                         base=self.recipe.base_dir)
        return self._pool.head(n)

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
        return self.simulator(config, config_path).run(self.requests_at(rate), rate)

    def goodput(self, config: EPDConfig | EPDStaticConfig,
                config_path: str | Path | None = None,
                on_probe: Callable[[Probe], None] | None = None,
                incumbent: float | None = None) -> GoodputResult:
        sim = self.simulator(config, config_path)
        ev = self.recipe.evaluator
        start = ev.start_rate or self.start_rate(config)
        return search_goodput(lambda r: sim.run(self.requests_at(r), r), self.recipe.slo,
                              start_rate=start, tolerance=ev.tolerance,
                              max_probes=ev.max_probes, on_probe=on_probe, incumbent=incumbent)

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
