"""Evaluate deployments of a recipe: one run at a rate, or the goodput search.

This is the library entry point the CLI (and the tuner) call.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from numbers import Integral, Real
from pathlib import Path

from hastune import archs, engine_terms
from hastune.config import AnyConfig
from hastune.errors import InputError, accepts, named_by
from hastune.goodput import GoodputResult, Probe, search_goodput
from hastune.profile import Profile
from hastune.recipe import MAX_REQUESTS, Recipe
from hastune.runs import RunResult
from hastune.sim import Simulator
from hastune.sim.instance import InstanceTiming
from hastune.sim.stoprule import StopRule
from hastune.sim.warmup import steady_run
from hastune.space import SearchSpace
from hastune.stability import Stability, stopped, unjudged
from hastune.workload import RequestSet, sample_requests

Config = AnyConfig


def check_requests(requests: int | None, field: str = "--requests") -> None:
    """Refuse a request count outside 1..MAX_REQUESTS (None: the recipe's workload.requests;
    0 is not "the default")."""
    if requests is None:
        return
    if isinstance(requests, bool) or not isinstance(requests, Integral) or not (
            1 <= requests <= MAX_REQUESTS):
        most = f"{MAX_REQUESTS:,}"
        raise InputError(None, field, f"must be a whole number of requests in 1..{most} (got "
                         f"{requests!r})", f"give {field} in 1..{most}, or leave it out for the "
                         "recipe's workload.requests")


def check_seed(seed: int | None, field: str = "--seed") -> None:
    """Refuse a seed numpy cannot take (negative; None: the recipe's)."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, Integral)
                             or seed < 0):
        raise InputError(None, field, f"must be a whole number ≥ 0 (got {seed!r})",
                         f"give {field} ≥ 0, or leave it out for the recipe's seed")


MAX_RATE = 1e6  # req/s (closed loop: clients); the goodput search stops at 1e5


def check_rate(rate: float, field: str = "--rate") -> None:
    """Refuse an arrival rate that is not a finite number in (0, MAX_RATE]."""
    if isinstance(rate, bool) or not isinstance(rate, Real) or not (
            math.isfinite(rate) and 0 < rate <= MAX_RATE):
        got = f"{rate:g}" if isinstance(rate, Real) else repr(rate)
        raise InputError(None, field, f"rate must be a finite number > 0 and ≤ "
                         f"{MAX_RATE:,.0f} (got {got})", "give an arrival rate in requests "
                         f"per second, > 0 and ≤ {MAX_RATE:,.0f}")


class Evaluation:
    """A recipe bound to its profile and request set (common random numbers).

    A full probe at rate Λ simulates max(N, M, Λ·T) requests (at most `evaluator.max_requests`):
    N is workload.requests, M `evaluator.min_requests` and T = min_span × W, W the longer of a
    request's mean zero-load lifetime (arrival to last token) and its SLO lifetime (TTFT SLO +
    TPOT SLO × (mean output − 1), the longest a passing request may take). So the window spans
    many lifetimes and many SLOs whatever N is, and a probe's stability verdict
    (hastune.stability) can tell a steady state from a queue that has not had time to grow; an
    unsettled one is run again twice as long, up to `extend` times. The search locates the
    answer with probes a quarter as long first (`scout`), then decides it with full ones.
    Longer runs extend shorter ones (the request set is prefix-consistent)."""

    name = "sim"

    def __init__(self, recipe: Recipe, profile: Profile | None = None,
                 requests: int | None = None, seed: int | None = None):
        check_requests(requests)
        check_seed(seed)
        self.recipe = recipe
        # several GPU types (cluster.inventory): a profile each, built or read on first use
        self.multi = len(recipe.cluster.types) > 1
        if self.multi and recipe.profile:
            raise InputError(recipe.path, "profile", f"names one profile, and the cluster "
                             f"holds {len(recipe.cluster.types)} GPU types",
                             "remove profile: (each type gets its shipped or built one)")
        self._views: dict[str, TypeView] = {}
        if profile is None:
            from hastune.evaluators.profile import resolve_profile

            profile, self.profile_source = resolve_profile(recipe)
        else:
            self.profile_source = None
        self.engine_terms = engine_terms.for_profile(recipe.engine, profile)
        if self.engine_terms is not None:  # what the engine adds to the kernels
            profile = engine_terms.apply(profile, self.engine_terms)
        self.profile = profile
        self._profiles = {recipe.cluster.gpu: profile}  # GPU type → its profile, with terms
        # what results record about those terms (describe, caveats)
        self.terms_record = engine_terms.record(recipe.engine, profile, self.engine_terms)
        self.seed = recipe.seed if seed is None else seed
        self.base_requests = requests or recipe.workload.requests
        self.closed = recipe.workload.arrival.process == "closed"
        self._pool: RequestSet = self._sample(self.base_requests)
        self.lifetime_s = self._zero_load_lifetime()
        slo = recipe.slo
        self.slo_lifetime_s = slo.ttft_s + slo.tpot_s * max(
            float(self._pool.output_tokens.mean()) - 1.0, 0.0)
        self._pool = self._ramped(self._pool)

    def _sample(self, n: int) -> RequestSet:
        try:
            reqs = sample_requests(self.recipe.workload, n, self.seed, base=self.recipe.base_dir)
        except InputError as exc:  # the trace file, and the recipe that names it
            if not self.recipe.workload.trace:
                raise
            raise named_by(exc, self.recipe.path, "workload.trace") from None
        return engine_terms.with_frontend(reqs, self.engine_terms)

    def _ramped(self, reqs: RequestSet) -> RequestSet:
        """Closed loop: the clients start evenly over one zero-load request lifetime (each run
        lengthens it to the loaded cycle where a pilot finds that longer: _run) — or together,
        as benchmark tools start them, where the requests carry their own jitter
        (engine_terms.jittered). Open loop: a serial front end's slack is that lifetime
        (RequestSet.life_s)."""
        if not self.closed:
            fe = reqs.frontend
            if fe is not None and fe.stream_token_s > 0:
                return dataclasses.replace(reqs, life_s=self.lifetime_s)
            return reqs
        if engine_terms.jittered(reqs.frontend):
            return reqs
        return dataclasses.replace(reqs, ramp_s=self.lifetime_s)

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

    @property
    def span_s(self) -> float:
        """The least arrival span of an open-loop probe (seconds of simulated time)."""
        return self.recipe.evaluator.min_span * max(self.lifetime_s, self.slo_lifetime_s)

    def probe_size(self, rate: float) -> int:
        """Requests simulated by a probe at `rate` (in closed loop: `rate` clients, each
        sending min_span requests)."""
        ev = self.recipe.evaluator
        if self.closed:
            n = max(self.base_requests, int(rate * ev.min_span) + 1)
        else:
            n = max(self.base_requests, ev.min_requests, int(math.ceil(rate * self.span_s)) + 1)
        return min(n, max(ev.max_requests, self.base_requests))

    def probe_cap(self, rate: float) -> int:
        """The most requests a probe at `rate` may grow to while its verdict is unsettled:
        `extend` × the longer of the min_span window and min_requests — independent of
        workload.requests, so runs of any base length that stay unsettled end on the same
        (prefix-consistent) request set and the same verdict."""
        ev = self.recipe.evaluator
        n = self.probe_size(rate)
        if self.closed:
            return n
        longest = int(math.ceil(ev.extend * max(rate * self.span_s, ev.min_requests, 100))) + 1
        return max(n, min(longest, ev.max_requests))

    def requests_at(self, rate: float, n: int | None = None) -> RequestSet:
        n = self.probe_size(rate) if n is None else n
        if n > len(self._pool):
            self._pool = self._ramped(self._sample(n))
        return self._pool.head(n)

    def judge(self, run: RunResult, final: bool = True) -> Stability:
        """The stability verdict on a probe's run (not judged in closed loop, where the
        clients cannot outrun the system, nor under a rate schedule, which is not meant to be
        stationary). `final` False: the run could still be made longer."""
        verdict = unjudged(self.recipe.workload)
        if verdict is not None:
            return verdict
        return run.stability(self.recipe.slo, self.recipe.evaluator.shortfall, final)

    def scout_size(self, rate: float) -> int:
        """Requests of a coarse probe (locating the answer): a quarter of the full window."""
        ev = self.recipe.evaluator
        if self.closed:
            return self.probe_size(rate)
        n = max(self.base_requests, ev.min_requests // 4,
                int(math.ceil(rate * self.span_s / 4)) + 1)
        return min(n, self.probe_size(rate))

    def _run(self, sim: Simulator, reqs: RequestSet, rate: float) -> RunResult:
        """One run; in closed loop its clients start over the loaded cycle (a pilot run's:
        hastune.sim.warmup.loaded_ramp) and it runs until its steady mean is known (doubled
        up to warmup.EXTEND times, within evaluator.max_requests: warmup.steady_run)."""
        if not self.closed:
            return sim.run(reqs, rate)
        return steady_run(sim, lambda m: self.requests_at(rate, m), len(reqs), rate,
                          self.recipe.evaluator.max_requests)

    def scout(self, sim: Simulator, rate: float) -> RunResult:
        """A coarse probe: scout_size(rate) requests, judged as they are."""
        run = self._run(sim, self.requests_at(rate, self.scout_size(rate)), rate)
        run.verdict = stopped(run.extra) or self.judge(run)
        return run

    def probe(self, sim: Simulator, rate: float) -> RunResult:
        """One full probe: a run of probe_size(rate) requests, twice as long while its verdict
        is not settled, up to probe_cap(rate); the run returned carries its verdict.

        Open loop, the run is one run of probe_cap(rate) requests, continued: its first
        probe_size(rate) requests are judged as soon as they have all left, and a settled
        verdict ends it there (StopRule.windows); an unsettled one lets it go on to twice as
        many, and so on — a longer probe extends the shorter one instead of starting again.
        A window's last requests are then served beside the ones arriving after them (the
        steady state goes on) rather than by a system emptying. Closed loop (and a simulator
        without a stop rule) runs each length from the start."""
        n, cap = self.probe_size(rate), self.probe_cap(rate)
        rule = sim.stop_rule
        if rule is not None and n < cap and not self.closed:
            windows = []
            while n < cap:
                windows.append(n)
                n = min(2 * n, cap)
            sim.stop_rule = dataclasses.replace(
                rule, windows=tuple(windows),
                judge=lambda run: self.judge(run, final=False).settled)
            try:
                run = self._run(sim, self.requests_at(rate, cap), rate)
            finally:
                sim.stop_rule = rule
            run.verdict = stopped(run.extra) or self.judge(run, final=run.ttft.size >= cap)
            return run
        while True:
            run = self._run(sim, self.requests_at(rate, n), rate)
            run.verdict = stopped(run.extra)
            if run.verdict is not None:
                return run
            verdict = self.judge(run, final=n >= cap)
            if verdict.settled:
                run.verdict = verdict
                return run
            n = min(2 * n, cap)

    def check(self, config: Config, config_path: str | Path | None = None) -> None:
        """Refuse a config this recipe cannot run, naming the field and the fix."""
        cluster = self.recipe.cluster
        arch = archs.of(config)
        if config.gpus > cluster.gpus:
            raise InputError(config_path, config.largest_gpu_knob,
                             f"the config uses {config.gpus} GPUs ({arch.gpu_formula}) but the "
                             f"recipe's budget cluster.gpus is {cluster.gpus}",
                             "use fewer GPUs in the config or raise cluster.gpus in the recipe")
        used = self._check_types(config, config_path)
        if len(used) > 1:
            arch.check_mixed(config, config_path)
        arch.check(self, config, config_path)

    def _check_types(self, config: Config, path: str | Path | None) -> dict[str, int]:
        """The config's GPUs per type; refused where it names a type the cluster lacks or
        puts more GPUs on a type than the cluster has of it."""
        cluster = self.recipe.cluster
        have = [t.gpu for t in cluster.types]
        for k in config.type_knobs:
            t = getattr(config, k)
            if t is not None and t not in have:
                raise InputError(path, k, f"{t!r} is not a GPU type of the recipe's cluster",
                                 f"use one of {', '.join(have)}, or null for {cluster.gpu}")
        used = config.gpus_by_type(cluster.gpu)
        for t, n in used.items():
            cap = cluster.only(t).gpus
            if n > cap:
                knob = next((k for k, (g, m) in zip(config.type_knobs,
                                                   config.pool_gpus(cluster.gpu))
                             if g == t and m), config.largest_gpu_knob)
                raise InputError(path, knob, f"the config puts {n} GPUs on {t}, and the "
                                 f"cluster has {cap} of them", "use fewer GPUs of that type, "
                                 "or another type for some pools (cluster.inventory)")
        return used

    def profile_of(self, gpu: str) -> Profile:
        """The profile of GPU type `gpu` of the cluster (with the engine's terms for it)."""
        if gpu not in self._profiles:
            from hastune.evaluators.profile import resolve_profile

            sub = self.recipe.model_copy(update={"cluster": self.recipe.cluster.only(gpu)})
            prof, _ = resolve_profile(sub)
            terms = engine_terms.for_profile(self.recipe.engine, prof)
            self._profiles[gpu] = prof if terms is None else engine_terms.apply(prof, terms)
        return self._profiles[gpu]

    def view(self, gpu: str) -> TypeView:
        """This evaluation on GPU type `gpu` alone: its profile, its nodes."""
        if gpu not in self._views:
            self._views[gpu] = TypeView(self, gpu)
        return self._views[gpu]

    def pool_view(self, config: Config, knob: str) -> Evaluation | TypeView:
        """What times and holds the pool whose GPU type is `config`'s `knob` (one-type
        cluster: this evaluation)."""
        if not self.multi:
            return self
        return self.view(getattr(config, knob, None) or self.recipe.cluster.gpu)

    def check_space(self, space: SearchSpace, space_path: str | Path | None = None) -> None:
        """Refuse a search space none of whose configurations this recipe can run (e.g. one
        GPU per worker for a model whose profile needs TP groups), with the first config's
        reason and where to look."""
        first: InputError | None = None
        for cfg in space.configs(self.recipe.cluster.gpus):
            try:
                self.check(cfg)
                return
            except InputError as exc:
                first = first or exc
        where = f"search space {space_path}" if space_path else f"{space.architecture} space"
        problem = (f"no configuration of the {where} can run here" + (
            f": {first.field + ': ' if first.field else ''}{first.problem}" if first else
            " (it lists none within cluster.gpus)"))
        raise InputError(self.recipe.path, "search_space", problem,
                         (first.fix + ", in a search space of your own (search_space: in the "
                          "recipe; examples/spaces/ has some)") if first and first.fix else
                         "give search_space: a space whose configurations fit")

    def instance_timing(self, tp: int, pp: int = 1, ep: int = 1) -> InstanceTiming:
        """Latencies and KV capacity of one model instance of tp × pp GPUs (experts over ep)."""
        return InstanceTiming(self.profile, tp, pp, self.recipe.cluster, ep=ep)

    def runnable(self, config: Config) -> bool:
        return accepts(self.check, config)

    def describe(self) -> dict:
        out = {"requests_per_probe": len(self.requests), "profile": self.profile.name,
               "probe_span_s": self.span_s,
               "engine_terms": self.terms_record}
        if self.profile_source is not None:
            out["profile_source"] = self.profile_source.as_dict()
        return out

    def caveats(self, config: Config, rate_rps: float, run: RunResult | None = None
                ) -> list[str]:
        """What a result of `config` at `rate_rps` (and its `run`, if given) does not model
        (hastune.caveats); of the engine's, none on a profile measured on a device, which
        holds the engine it was measured on."""
        from hastune.caveats import built_tp, caveats, closed_loop

        out = closed_loop(run.extra) if run is not None else []
        fit = self.profile.fit
        out += built_tp(fit.kernel_source if fit is not None else None, self.profile.gpu,
                        config)
        if not engine_terms.applies(self.profile):
            return out
        return caveats(self.terms_record, config, rate_rps, self.in_flight(rate_rps, run),
                       moe=self._moe()) + out

    def _moe(self) -> bool | None:
        """Whether the recipe's model is MoE (None: its config cannot be read here)."""
        from hastune.model_ref import load_arch

        try:
            return bool(load_arch(self.recipe).llm.moe)
        except Exception:  # noqa: BLE001 - a caveat is not worth an error
            return None

    def in_flight(self, rate_rps: float, run: RunResult | None) -> float | None:
        """The requests in flight at `rate_rps`, each one's own included: in closed loop its
        clients; in open loop the mean, over `run`'s measured requests, of the requests in
        the system when each arrived (hastune.sim.frontend.in_flight_at: the count the
        simulator's per-stream wait multiplies), plus itself; None without a run. What the
        caveat on the front end's per-stream wait counts (hastune.caveats)."""
        if self.closed:
            return rate_rps
        if run is None or run.arrival is None or run.finish is None:
            return None
        from hastune.sim.frontend import in_flight_at

        seen = in_flight_at(run.arrival, run.finish)[run.measured]
        return float(seen.mean()) + 1.0 if seen.size else None

    def close(self) -> None:
        pass  # a simulator holds nothing

    def simulator(self, config: Config,
                  config_path: str | Path | None = None) -> Simulator:
        self.check(config, config_path)
        config = engine_terms.config_defaults(config, self.engine_terms)
        arch, cluster = archs.of(config), self.recipe.cluster
        pools = config.pool_gpus(cluster.gpu)
        used = {t for t, n in pools if n}
        if len(used) > 1:  # pools on several types: each pool's profile, each type's nodes
            sim = arch.simulator(
                self.profile_of(pools[0][0]), cluster, config, self.recipe.workload.warmup,
                self.recipe.slo, pools={name: self.profile_of(t)
                                        for name, (t, _) in zip(arch.pool_names, pools)},
                layout=cluster.node_layout(pools))
        else:
            v = self.view(used.pop()) if self.multi else self
            sim = arch.simulator(v.profile, v.recipe.cluster, config,
                                 self.recipe.workload.warmup, self.recipe.slo)
        if not self.closed:
            slo = self.recipe.slo
            att = slo.criterion == "attainment"
            sim.stop_rule = StopRule(slo.ttft_s, slo.tpot_s,
                                     slo.attainment if att else slo.percentile / 100.0, att,
                                     self.recipe.workload.warmup)
        return sim

    def run(self, config: Config, rate: float,
            config_path: str | Path | None = None) -> RunResult:
        check_rate(rate)
        return self.probe(self.simulator(config, config_path), rate)

    def goodput(self, config: Config,
                config_path: str | Path | None = None,
                on_probe: Callable[[Probe], None] | None = None,
                incumbent: float | None = None, early_stop: bool = False) -> GoodputResult:
        """The goodput search (hastune.goodput): the configuration's own probes on the recipe's
        rate grid, so it gets one number; `incumbent` is used only with `early_stop` (the
        search stops once a full probe fails at or below it: that configuration cannot win)."""
        sim = self.simulator(config, config_path)
        ev = self.recipe.evaluator
        start = ev.start_rate or self.start_rate(config)
        res = search_goodput(lambda r: self.scout(sim, r), self.recipe.slo,
                             start_rate=start, tolerance=ev.tolerance,
                             min_rate=1.0 if self.closed else 1e-3,
                             max_probes=ev.max_probes, on_probe=on_probe, incumbent=incumbent,
                             early_stop=early_stop, integer=self.closed,
                             confirm=None if self.closed else (lambda r: self.probe(sim, r)))
        if self.closed:
            # the search ran over the number of clients; goodput is the throughput they drew
            run = res.best_run
            res.goodput_rps = run.extra.get("throughput_rps", 0.0) if run is not None else 0.0
        return res

    def start_rate(self, config: Config) -> float:
        """A first guess near the decode capacity, so the bracket takes few probes (in closed
        loop: a number of clients)."""
        reqs = self.requests
        ctx = float((reqs.prefill_tokens + reqs.output_tokens / 2).mean())
        out = float(reqs.output_tokens.mean())
        arch = archs.of(config)
        dec, cap = arch.decode_timing(self, config)
        units = arch.decode_units(config)  # decode instances (a colocated replica: about half)
        slots = max(1.0, min(dec.max_batch, cap / max(ctx + out / 2, 1.0)))
        step = dec.step(int(slots), slots * ctx)
        per_unit = slots / max(step * max(out - 1, 1.0), 1e-9)
        if self.closed:
            return max(1.0, round(0.5 * slots * units))
        return max(0.01, round(0.5 * per_unit * units, 3))


class TypeView:
    """An Evaluation on one GPU type of a cluster of several: that type's profile and a
    cluster of its GPUs alone (what a pool on it is checked and timed with); the rest is the
    evaluation's."""

    def __init__(self, ev: Evaluation, gpu: str):
        self.ev, self.gpu = ev, gpu
        self.profile = ev.profile_of(gpu)
        self.recipe = ev.recipe.model_copy(update={"cluster": ev.recipe.cluster.only(gpu)})

    def instance_timing(self, tp: int, pp: int = 1, ep: int = 1) -> InstanceTiming:
        return InstanceTiming(self.profile, tp, pp, self.recipe.cluster, ep=ep)

    def pool_view(self, config: Config, knob: str) -> TypeView:
        return self

    def __getattr__(self, name: str):
        return getattr(self.ev, name)
