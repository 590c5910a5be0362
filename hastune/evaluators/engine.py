"""The real evaluator: runs a deployment in the engine (runners/) with a real model and
measures goodput from real timestamps, with the same goodput search as the simulator.

Short runs: `requests` per probe (default 120), each probe's arrivals capped at `max_span_s`
seconds, 10% tolerance, ≤ 8 probes (the recipe's tolerance when coarser, its max_probes when
fewer) — a real probe costs seconds, not milliseconds. Each probe
carries the simulator's stability verdict (hastune.stability) with a wider shortfall (10%);
a real probe is not extended but, when its verdict is within the noise of the SLO
(`Probing.close_call`) or it is one of the two that bracket the answer, run again with the
same requests and arrivals, up to `repeats` runs, and decided by their majority; the result
reports its `spread` (hastune.goodput, docs/engine.md "Noisy probes"). The engine
starts once per deployment and serves every probe. torch loads only in the worker processes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hastune import archs
from hastune.config import AnyConfig
from hastune.errors import InputError, accepts
from hastune.goodput import GoodputResult, Probe, search_goodput
from hastune.recipe import Recipe
from hastune.runs import RunResult
from hastune.stability import Stability, unjudged
from hastune.workload import RequestSet, sample_requests

Config = AnyConfig


@dataclass
class ProbeOptions:
    """How the evaluators that measure a live deployment (Probing's subclasses) probe it."""

    requests: int = 120
    max_span_s: float = 20.0
    tolerance: float = 0.1
    shortfall: float = 0.1          # stability: short real runs are noisier than simulated ones
    max_probes: int = 8
    warmup: float = 0.1
    warm_requests: int = 12         # untimed requests before the first probe
    repeats: int = 3                # runs of a close probe at most (majority; 1: never again)
    noise_band: float = 0.1         # a P90 within ±10% of its SLO is a close call


@dataclass
class RealOptions(ProbeOptions):
    device: str = "cpu"
    kv_tokens: int = 1 << 16
    backend: str = "local"          # local processes or ray actors (runners/engine/backend.py)
    ray_address: str | None = None  # the Ray cluster to join (default: start a local one)
    threads: int = 1                # torch threads per worker (CPU: each on a core of its own)
    # a deployment needing more cores / GPUs than this process has is refused (check); True
    # runs it, workers sharing devices, and the record says it is not comparable with the sim
    oversubscribe: bool = False
    record_steps: bool = True       # each worker's step timings into the record (describe)
    warm_rate: float = 6.0          # the warm-up's rate (req/s), on each new engine


def _vocab(model: str) -> int:
    try:
        from runners.model.config import get_config

        return get_config(model).lm.vocab
    except (ImportError, ValueError):
        return 1000


class Probing:
    """What the evaluators that measure a live deployment share (this module's engine and
    hastune.evaluators.openai's OpenAI-compatible servers): short probes drawn from `pool`, the
    stability verdict with a real run's wider shortfall, the simulator's first guess of a
    rate, and closing the deployment when used as a context manager. Subclasses set
    `recipe`, `opts` (requests, max_span_s, shortfall) and `pool`, and define `check` and
    `close`."""

    recipe: Recipe
    pool: RequestSet
    opts: Any

    def caveats(self, config: Any, rate_rps: float, run: Any = None) -> list[str]:
        """None: a measured result is not the simulator's (hastune.caveats)."""
        return []

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # type: ignore[attr-defined]

    def requests_at(self, rate: float) -> RequestSet:
        n = min(self.opts.requests, max(20, int(rate * self.opts.max_span_s)))
        return self.pool.head(n)

    def judge(self, run: RunResult) -> Stability:
        """The stability verdict on a real run (hastune.stability), with the wider
        `shortfall` a short real run needs; not judged in closed loop or under a schedule."""
        verdict = unjudged(self.recipe.workload)
        if verdict is not None:
            return verdict
        return run.stability(self.recipe.slo, self.opts.shortfall)

    def close_call(self, run: RunResult, probe: Probe) -> bool:
        """Whether a probe's verdict is within the noise of the SLO, so that it is run again:
        its P90 TTFT or TPOT within ±`noise_band` of the SLO; or the share of requests over
        an SLO (attainment: missing either) within 2 binomial standard errors of the share
        the criterion allows (P90: 10%; ±5.8% at 108 measured requests); or a verdict that
        hinges on the steady-state test: the SLOs met on the window but not stable (a short
        run's throughput and last third are noisy)."""
        slo, band = self.recipe.slo, self.opts.noise_band
        if slo.criterion != "attainment" and any(
                abs(got / want - 1.0) <= band for got, want in
                ((probe.ttft_p, slo.ttft_s), (probe.tpot_p, slo.tpot_s))):
            return True
        ttft, tpot = run.ttft[run.measured], run.tpot[run.measured]
        with np.errstate(invalid="ignore"):
            if slo.criterion == "attainment":
                allowed = 1.0 - slo.attainment
                overs = [(ttft > slo.ttft_s) | (~np.isnan(tpot) & (tpot > slo.tpot_s))]
            else:
                allowed = 1.0 - slo.percentile / 100.0
                overs = [ttft > slo.ttft_s, tpot[~np.isnan(tpot)] > slo.tpot_s]
        for over in overs:
            if over.size and abs(over.mean() - allowed) <= 2.0 * math.sqrt(
                    allowed * (1.0 - allowed) / over.size):
                return True
        v = probe.stability
        if v is None or not v.judged:
            return False
        return not v.stable and probe.slo_met

    def grid(self) -> dict:
        """search_goodput's grid: the recipe's tolerance when coarser than the options', its
        max_probes when fewer."""
        ev = self.recipe.evaluator
        return {"tolerance": max(self.opts.tolerance, ev.tolerance),
                "max_probes": min(self.opts.max_probes, ev.max_probes)}

    def noise(self) -> dict:
        """search_goodput's arguments for repeating close probes."""
        return {"repeat": self.close_call, "repeats": self.opts.repeats}

    def runnable(self, config: Config) -> bool:
        return accepts(self.check, config)  # type: ignore[attr-defined]

    def _start_rate(self, config: Config) -> float:
        """The simulator's first guess when the recipe has a profile, else 2 req/s."""
        try:
            from hastune.evaluators.sim import Evaluation

            return Evaluation(self.recipe, requests=self.opts.requests).start_rate(config)
        except InputError:
            return 2.0


class RealEvaluation(Probing):
    name = "real"

    def __init__(self, recipe: Recipe, options: RealOptions | None = None,
                 requests: int | None = None, seed: int | None = None):
        recipe.check_one_type()  # pools on several GPU types: not yet
        self.recipe = recipe
        self.opts = options or RealOptions()
        from runners.engine.backend import check

        check(self.opts.backend)  # unknown, or ray not installed: say so before any work
        if requests:
            self.opts.requests = requests
        self.seed = recipe.seed if seed is None else seed
        self.pool: RequestSet = sample_requests(recipe.workload, self.opts.requests, self.seed,
                                                base=recipe.base_dir)
        self.vocab = _vocab(recipe.model)
        self._engines: dict[str, object] = {}
        self.fit: dict | None = None          # the last engine's devices (fit.Fit.as_dict)
        # every probe's step timings: {"config", "rate", "workers": {name: columns}}
        self.steps: list[dict] = []

    def _engine(self, config: Config, config_path: object = None):
        from runners.engine import Engine, EngineOptions

        key = config.model_dump_json()
        eng = self._engines.get(key)
        if eng is None:
            self.check(config, config_path)
            from runners.engine.backend import preflight

            # torch, the device, and no module:factory from a recipe (only --model may)
            preflight(self.recipe.model, self.opts.device, model_from="model",
                      path=self.recipe.path, fix="use a preset (ref-tiny, ref-small, "
                      "ref-base); a module:factory model runs only as hastune serve --model")
            slo = self.recipe.slo
            try:
                eng = Engine(config, EngineOptions(model=self.recipe.model,
                                                   device=self.opts.device,
                                                   threads=self.opts.threads,
                                                   oversubscribe=self.opts.oversubscribe,
                                                   record_steps=self.opts.record_steps,
                                                   kv_tokens=self.opts.kv_tokens,
                                                   backend=self.opts.backend,
                                                   ray_address=self.opts.ray_address,
                                                   ttft_slo_s=slo.ttft_s,
                                                   tpot_slo_s=slo.tpot_s)).start()
            except (RuntimeError, ValueError) as exc:
                raise InputError(self.recipe.path, "model", f"the engine could not start "
                                 f"model {self.recipe.model!r}: {exc}", "use a model the "
                                 "engine knows (ref-tiny, ref-small, ref-base or "
                                 "package.module:factory)") from None
            self._engines[key] = eng
            self.fit = eng.fit.as_dict()  # type: ignore[attr-defined]
            self._warm(eng)
        return eng

    def _warm(self, eng: object) -> None:
        """A short untimed load before the first probe: a fresh engine's first steps run
        cold (allocations, lazy initialisation), which the simulator does not model. The
        admission gate is then made anew, so the first probe's starts unmeasured as before.
        First probe of a fresh engine, epd 1-0-1 at 25 req/s on the loaded 2-core machine
        (load average 4), SLO attainment in two alternating pairs: no warm-up 0.50 / 0.43,
        warm-up 0.68 / 0.80 (a gate kept from the warm-up: 0.61 / 0.64, more rejected)."""
        if self.opts.warm_requests <= 0:
            return
        from runners.engine.load import jobs_from

        rate = self.opts.warm_rate
        jobs, offsets = jobs_from(self.pool.head(min(self.opts.warm_requests,
                                                     len(self.pool))), rate, self.vocab,
                                  self.seed + 1)
        eng.run(jobs, offsets, rate)  # type: ignore[attr-defined]
        eng._gate(eng._entry)  # type: ignore[attr-defined]  # the probes' gate starts unmeasured

    def close(self) -> None:
        for eng in self._engines.values():
            eng.stop()  # type: ignore[attr-defined]
        self._engines.clear()

    def run(self, config: Config, rate: float, config_path: object = None) -> RunResult:
        from runners.engine.load import jobs_from, to_result

        eng = self._engine(config, config_path)
        jobs, offsets = jobs_from(self.requests_at(rate), rate, self.vocab, self.seed)
        rec = eng.run(jobs, offsets, rate)  # type: ignore[attr-defined]
        if rec.steps:
            self.steps.append({"config": config.model_dump(mode="json"), "rate": rate,
                               "workers": rec.steps})
        run = to_result(rec, self.opts.warmup)
        run.verdict = self.judge(run)
        return run

    def check(self, config: Config, config_path: object = None) -> None:
        """What the engine cannot run (its architecture module says: tp/pp > 1, mitosis, an
        architecture without an engine mode), what the recipe's budget does not hold, and
        what this machine does not hold (runners/engine/fit.py: cores or GPUs; unless
        `oversubscribe`)."""
        if config.gpus > self.recipe.cluster.gpus:
            raise InputError(config_path, None, f"the config uses {config.gpus} GPUs but the "
                             f"recipe's budget is {self.recipe.cluster.gpus}",
                             "lower the pools or raise cluster.gpus")
        archs.of(config).engine_check(config, config_path)
        from runners.engine.fit import check_fit

        o = self.opts
        check_fit(config, o.device, o.threads, o.backend, o.oversubscribe, config_path)

    def describe(self) -> dict:
        """How it measured: requests per probe, the backend, the devices (`fit`: what the
        deployment needs and has; `oversubscribed` and a note when it ran on fewer) and
        every probe's step timings (`engine_steps`, runners/engine/steplog.py), the input of
        `hastune calibrate`."""
        out: dict = {"requests_per_probe": self.opts.requests, "backend": self.opts.backend,
                     "repeats": self.opts.repeats, "noise_band": self.opts.noise_band}
        if self.fit is not None:
            out["fit"] = self.fit
            if self.fit.get("oversubscribed"):
                out["comparable_with_sim"] = False
        if self.steps:
            out["engine_steps"] = self.steps
        return out

    def goodput(self, config: Config, config_path: object = None,
                on_probe: Callable[[Probe], None] | None = None,
                incumbent: float | None = None, early_stop: bool = False) -> GoodputResult:
        self.check(config, config_path)  # before any probe
        start = self.recipe.evaluator.start_rate or self._start_rate(config)
        try:
            return search_goodput(lambda r: self.run(config, r, config_path), self.recipe.slo,
                                  start_rate=start, on_probe=on_probe, incumbent=incumbent,
                                  early_stop=early_stop, min_rate=0.05, max_rate=1e3,
                                  **self.grid(), **self.noise())
        finally:
            self.close()
