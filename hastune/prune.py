"""Stage 1 of Hybrid Auto Selection: asymmetric pruning.

Each rule removes configurations that cannot work or cannot win, from the profile alone:

- `structural` — invalid knob combinations (s > 0 with no remote pool);
- `memory` — an LLM that does not fit beside the encoder when local prefill is used (s < 1),
  or decode GPUs that cannot hold the weights plus the largest request's KV;
- `zero_load` — even alone on an idle cluster, too many requests miss an SLO: per request,
  TTFT ≥ encode(batch of one) + prefill(alone), TPOT ≥ one decode step of a batch of one; if the
  percentile (or attainment) of these lower bounds already fails, no rate can pass;
- `equivalent` — knobs that change nothing for this workload (B and p without multimodal
  requests): all but one copy go;
- `capacity` — an upper bound on goodput from per-stage capacity (encode: compute, grows with B;
  prefill: split by s between local and remote; decode: memory- and step-bound; network) that,
  times `margin`, stays below the best goodput already found by simulating the top-ranked
  candidates. The bounds differ per stage: that is the asymmetry.

Every bound is an upper bound on a deployment's sustainable throughput, and goodput is a
steady-state rate (hastune.stability), so goodput ≤ bound × margin with the margin derived from
the probe's tolerances (`derived_margin`); the optimum is never pruned (tests compare with
exhaustive search on generated recipes).

Under another objective than goodput (hastune.cost.Objective: value = goodput × scale(cfg),
goodput per dollar) candidates are ranked, probed and compared by value: value ≤ bound × scale
× margin, so the capacity rule stays sound against the best value probed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hastune import archs
from hastune.config import AnyConfig, config_dict, knob_items, parse_config
from hastune.errors import InputError
from hastune.profile import Profile
from hastune.recipe import Recipe
from hastune.sim.instance import InstanceTiming
from hastune.space import SearchSpace
from hastune.workload import RequestSet

Config = AnyConfig
RULES = ("structural", "engine", "target", "memory", "zero_load", "equivalent", "capacity")
RULE_MEANING = {
    "structural": "not a valid deployment of its architecture",
    "engine": "the engine cannot run it (--evaluator real)",
    "target": "the --target engine cannot launch it as tuned",
    "memory": "weights and KV cache do not fit in GPU memory",
    "zero_load": "misses the TTFT or TPOT SLO even with one request in the system",
    "equivalent": "the same deployment as another one kept",
    "capacity": "its goodput bound is below a goodput already reached",
}


def emptied(removed: dict[str, int], total: int) -> str:
    """Why pruning kept nothing: each rule that removed configurations, largest first."""
    parts = [f"{rule} {n} ({RULE_MEANING.get(rule, rule)})"
             for rule, n in sorted(removed.items(), key=lambda kv: -kv[1]) if n]
    return (f"pruning removed all {total} configurations: " + "; ".join(parts)
            if total else "the search space holds no configuration at this GPU budget")


@dataclass
class Candidate:
    config: Config
    bound: float                     # upper bound on goodput, req/s
    stages: dict[str, float]         # per-stage capacity bounds, req/s
    goodput: float | None = None     # when simulated during pruning

    def as_dict(self) -> dict:
        d = {"config": config_dict(self.config),
             "bound_rps": self.bound, "stage_bounds_rps": self.stages}
        if self.goodput is not None:
            d["goodput_rps"] = self.goodput
        return d


@dataclass
class PruneReport:
    total: int
    kept: list[Candidate]
    removed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RULES, 0))
    lower_bound: float = 0.0
    margin: float = 1.0

    def as_dict(self, top: int | None = None) -> dict:
        kept = self.kept if top is None else self.kept[:top]
        return {"total": self.total, "kept": len(self.kept), "rules": dict(self.removed),
                "lower_bound_rps": self.lower_bound, "margin": self.margin,
                "candidates": [c.as_dict() for c in kept]}


# Requests the capacity bounds average over (at least): a bound is a mean of per-request work,
# and long probes see the workload's long-run mean, not a few hundred requests' (with heavy-
# tailed lengths the two differ by 10–20%, and a bound from the short sample fails to bound).
CAPACITY_SAMPLE = 20_000


def capacity_sample(recipe: Recipe, reqs: RequestSet) -> RequestSet:
    """The request set capacity bounds are computed on: `reqs` extended (same seed, prefix-
    consistent) to CAPACITY_SAMPLE requests."""
    if len(reqs) >= CAPACITY_SAMPLE:
        return reqs
    from hastune.workload import sample_requests

    return sample_requests(recipe.workload, CAPACITY_SAMPLE, reqs.seed, base=recipe.base_dir)


class Bounds:
    """Per-request and per-stage bounds of one recipe (profile + request set). Zero-load and
    memory checks read `reqs` (the base request set); capacity bounds read `capacity_reqs`
    (default: the base set extended to CAPACITY_SAMPLE requests)."""

    def __init__(self, recipe: Recipe, profile: Profile, reqs: RequestSet,
                 capacity_reqs: RequestSet | None = None):
        self.recipe, self.profile, self.reqs = recipe, profile, reqs
        self.cap_reqs = capacity_reqs or capacity_sample(recipe, reqs)
        enc, pre, dec, mem = profile.encode, profile.prefill, profile.decode, profile.memory
        tok = reqs.encoder_tokens
        self.mm = tok > 0
        L = reqs.prefill_tokens
        out = reqs.output_tokens
        # zero-load lower bounds per request
        enc_alone = np.where(self.mm, enc.latency(1, tok, tok * tok), 0.0)  # type: ignore[arg-type]
        self.ttft_lb = enc_alone + pre.latency(L, L * L)  # type: ignore[arg-type]
        self.tpot_lb = np.where(out > 1, dec.step(1, L + 1), np.nan)  # type: ignore[arg-type]
        self.max_reserve = float((L + 1 + out).max())
        self.local_fits = mem.kv_capacity_tokens(with_encoder=True) > float(L.max())
        self.kv_cap = mem.kv_capacity_tokens()
        # capacity: per-request work (GPU-seconds on a whole GPU) over the long-run sample
        cr = self.cap_reqs
        tok = cr.encoder_tokens
        mm = tok > 0
        L = cr.prefill_tokens
        out = cr.output_tokens
        # per-request work (GPU-seconds on a whole GPU), fixed costs excluded where batched
        self.enc_work_var = float(np.where(
            mm, enc.per_item_s + enc.per_token_s * tok + enc.per_token_sq_s * tok * tok,
            0.0).mean())
        self.mm_share = float(mm.mean())
        self.prefill_work = float((pre.per_token_s * L + pre.per_token_sq_s * L * L).mean())
        ctx_min, N, self.decode_kv_per_gpu = _decode_limits(dec, self.kv_cap, L, out)
        steps = float(np.maximum(out - 1, 0).mean())
        tokens_per_s = N / dec.step(N, N * ctx_min)
        self.decode_per_gpu = tokens_per_s / steps if steps > 0 else float("inf")
        self.kv_bytes = float((L * mem.kv_bytes_per_token).mean())
        c = recipe.cluster
        self.port_bw = max(c.intra_node.bandwidth_GBps, c.inter_node.bandwidth_GBps) * 1e9

        self._shapes: dict[tuple[int, int, bool, int], _Shape | None] = {}
        self._zero_whole: bool | None = None
        self._at_tp: dict[int, Bounds | None] = {profile.tp: self}
        self._lb_cache: dict[tuple, bool] = {}

    def at_tp(self, tp: int) -> Bounds | None:
        """These bounds for one GPU-worker of a TP group of `tp` GPUs (the profile's variant:
        latencies with the all-reduce inside, memory per GPU), on the same request sets; None
        if the profile has no such variant."""
        if tp not in self._at_tp:
            self._at_tp[tp] = (Bounds(self.recipe, self.profile.for_tp(tp), self.reqs,
                                      self.cap_reqs) if tp in self.profile.tp_degrees else None)
        return self._at_tp[tp]

    def lb_ok_cached(self, key: tuple, ttft_lb, tpot_lb) -> bool:
        """`lb_ok`, remembered under `key` (many configs share their lower bounds)."""
        if key not in self._lb_cache:
            self._lb_cache[key] = self.lb_ok(ttft_lb() if callable(ttft_lb) else ttft_lb,
                                             tpot_lb() if callable(tpot_lb) else tpot_lb)
        return self._lb_cache[key]

    def shape(self, tp: int, pp: int, encoder: bool = True, ep: int = 1) -> _Shape | None:
        """Bounds of one instance of tp × pp GPUs, its experts over ep of them (None: the
        profile lacks tp or that ep at tp, or a TP group would span nodes, or the weights leave
        no KV room). `encoder`: it also holds the encoder's weights (when the workload is
        multimodal)."""
        key = (tp, pp, encoder and bool(self.mm.any()), ep)
        if key not in self._shapes:
            self._shapes[key] = _Shape.of(self, tp, pp, key[2], ep)
        return self._shapes[key]

    def shapes(self, cfg: Config) -> list[_Shape | None]:
        """The bounds of each kind of model instance `cfg` runs (its architecture's
        `shapes`)."""
        return [self.shape(sh.tp, sh.pp, sh.encoder, sh.ep) for sh in archs.of(cfg).shapes(cfg)]

    def lb_ok(self, ttft_lb: np.ndarray, tpot_lb: np.ndarray) -> bool:
        slo = self.recipe.slo
        w = int(self.recipe.workload.warmup * len(self.reqs))
        ttft, tpot = ttft_lb[w:], tpot_lb[w:]
        if slo.criterion == "attainment":
            ok = (ttft <= slo.ttft_s) & (np.isnan(tpot) | (tpot <= slo.tpot_s))
            return bool(ok.mean() >= slo.attainment)
        tp = tpot[~np.isnan(tpot)]
        return bool(np.percentile(ttft, slo.percentile, method="higher") <= slo.ttft_s
                    and (tp.size == 0
                         or np.percentile(tp, slo.percentile, method="higher") <= slo.tpot_s))

    # the per-architecture rules (hastune/archs/<name>.py), for one config
    def memory_ok(self, cfg: Config) -> bool:
        return archs.of(cfg).memory_ok(self, cfg)

    def zero_load_ok(self, cfg: Config) -> bool:
        return archs.of(cfg).zero_load_ok(self, cfg)

    def stages(self, cfg: Config) -> dict[str, float]:
        return archs.of(cfg).stages(self, cfg)

    @property
    def zero_load_whole_gpu(self) -> bool:
        """Whether the per-request bounds on whole, unshared GPUs (tp 1) meet the SLOs."""
        if self._zero_whole is None:
            self._zero_whole = self.lb_ok(self.ttft_lb, self.tpot_lb)
        return self._zero_whole


class TypedBounds:
    """The Bounds of a configuration by the GPU types its pools sit on: on one type, that
    type's (its profile, its nodes: built on first use); on several, None — no bound of such
    a mix is derived yet, so pruning keeps it unbounded (sound) and only the simulator judges
    it. `ev`: the evaluation whose request set and per-type profiles they read."""

    def __init__(self, recipe: Recipe, ev: Any):
        self.recipe, self.ev = recipe, ev
        self._by_type: dict[str, Bounds] = {}

    def __call__(self, cfg: Config) -> Bounds | None:
        cluster = self.recipe.cluster
        used = {t for t, n in cfg.pool_gpus(cluster.gpu) if n}
        if len(used) > 1:
            return None
        t = used.pop() if used else cluster.gpu
        if t not in self._by_type:
            many = len(cluster.types) > 1
            rec = (self.recipe.model_copy(update={"cluster": cluster.only(t)}) if many
                   else self.recipe)
            prof = self.ev.profile_of(t) if many else self.ev.profile
            self._by_type[t] = Bounds(rec, prof, self.ev.requests)
        return self._by_type[t]


def _decode_limits(dec: Any, kv_cap: float, L: np.ndarray,
                   out: np.ndarray) -> tuple[float, int, float]:
    """(the shortest context L + 1, the largest decode batch N, the requests per second the
    KV cache admits) of decode with `kv_cap` cache tokens over requests of prompt `L` and
    output `out` tokens. A request's cache starts at L + 1 tokens and grows a token per decode
    step, so N ≤ kv_cap / min(L + 1), and over its s = out − 1 steps it holds at least
    Σ (L + i) = s·L + s(s+1)/2 token-steps, each step no shorter than a lone one. (Charging
    L + out on every step held more than the simulator does: an unsound bound where KV limits
    decode — llama-30b on one 80 GB GPU reached 1.09× it.)"""
    ctx_min = float((L + 1).min())
    N = max(1, min(dec.max_batch, int(kv_cap // max(ctx_min, 1.0))))
    s = np.maximum(out - 1, 0)
    kv_seconds = float(((s * L + s * (s + 1) / 2) * dec.step(1, ctx_min)).mean())
    return ctx_min, N, kv_cap / kv_seconds if kv_seconds > 0 else float("inf")


UNBOUNDED = {"encode": float("inf"), "prefill": float("inf"), "decode": float("inf"),
             "network": float("inf")}


class _Shape:
    """Per-request bounds at one instance shape (tp, pp, ep)."""

    __slots__ = ("kv_cap", "max_reserve", "ttft_lb", "tpot_lb", "prefill_s", "decode_s",
                 "kv_rate", "kv_bytes")

    @classmethod
    def of(cls, b: Bounds, tp: int, pp: int, encoder: bool, ep: int = 1) -> _Shape | None:
        c = b.recipe.cluster
        if tp not in b.profile.tp_degrees or tp > c.gpus_per_node \
                or ep not in b.profile.ep_degrees(tp):
            return None
        tm = InstanceTiming(b.profile, tp, pp, c, with_encoder=encoder, ep=ep)
        if tm.kv_cap <= 0:
            return None
        sh = cls()
        r = b.reqs
        L, out = r.prefill_tokens, r.output_tokens
        tok = r.encoder_tokens
        enc = tm.encode
        enc_lb = np.where(b.mm, tm.encode_latency(1, tok, tok * tok), 0.0)  # type: ignore
        sh.kv_cap = tm.kv_cap
        reserve = L + out
        sh.max_reserve = float(reserve.max())
        sh.ttft_lb = enc_lb + tm.p_fixed + tm.p_tok * L + tm.p_sq * L * L
        dec = tm.decode
        sh.tpot_lb = np.where(out > 1, dec.step(1, L + 1), np.nan)  # type: ignore[arg-type]
        # capacity: over the long-run sample
        r = b.cap_reqs
        L, out = r.prefill_tokens, r.output_tokens
        tok = r.encoder_tokens
        reserve = L + out
        enc_var = np.where(tok > 0, enc.per_item_s + enc.per_token_s * tok
                           + enc.per_token_sq_s * tok * tok, 0.0)
        sh.prefill_s = float((enc_var + (tm.p_tok * L + tm.p_sq * L * L) / pp).mean())
        ctx_min, N, sh.kv_rate = _decode_limits(dec, tm.kv_cap, L, out)
        steps = float(np.maximum(out - 1, 0).mean())
        sh.decode_s = steps * dec.step(N, N * ctx_min) / N
        sh.kv_bytes = tm.kv_bytes_per_token
        return sh


def _raw_combos(space: SearchSpace, budget: int):
    others = space.other_knobs()
    for alloc in space.allocations(budget):
        for values in itertools.product(*(space.choices(k) for k in others)):
            yield {"architecture": space.architecture, **dict(zip(space.gpu_knobs(), alloc)),
                   **dict(zip(others, values))}


def derived_margin(recipe: Recipe) -> float:
    """How far a goodput may exceed a capacity bound: (1 + tolerance) / (1 − shortfall).

    A passing probe at rate Λ was stable: its departures kept within `shortfall` of its
    arrivals, and no deployment departs faster than its capacity μ, so Λ·(1 − shortfall) ≤ μ
    over the measured window; one step of the rate grid (`tolerance`) covers a window whose
    arrivals came in below the nominal rate (bursts). So goodput ≤ bound × margin for any
    bound ≥ μ (tests/test_prune_soundness.py checks it on generated recipes)."""
    ev = recipe.evaluator
    return (1.0 + ev.tolerance) / (1.0 - ev.shortfall)


def keeps(recipe: Recipe, bound: float, margin: float, lower_bound: float) -> bool:
    """The capacity rule: keep a configuration that could come within the search tolerance of
    the best goodput reached (bound × margin ≥ (1 − tolerance) × lower bound), so neither the
    optimum nor any configuration as good within the tolerance is removed."""
    return bound * margin >= (1.0 - recipe.evaluator.tolerance) * lower_bound


def prune(recipe: Recipe, profile: Profile, reqs: RequestSet, space: SearchSpace,
          evaluate: Callable[[Config], float] | None = None, probe_top: int = 3,
          margin: float | None = None,
          runnable: Callable[[Config], bool] | None = None,
          lower_bound: float = 0.0,
          deployable: Callable[[Config], bool] | None = None,
          evaluate_many: Callable[[list[Config]], list[float]] | None = None,
          scale: Callable[[Config], float] | None = None,
          bounds: Callable[[Config], Bounds | None] | None = None,
          fits: Callable[[Config], bool] | None = None) -> PruneReport:
    """Apply the rules in order; `evaluate(config) → goodput` (the simulator) supplies the
    lower bound from the `probe_top` best-bounded candidates (none: capacity rule skipped;
    `evaluate_many`, given, evaluates them together: the same values).
    `runnable` (tuning with the real evaluator: can the engine run it?) removes the rest
    under the `engine` rule, before anything is probed; `deployable` (tune --target: can that
    engine launch it as tuned?) the rest under the `target` rule. `lower_bound`: a goodput already
    reached (another architecture's probes in the same study): the capacity rule uses the
    larger of it and this space's own probes — any reached goodput bounds the optimum below.
    `scale` (an objective other than goodput: its value per req/s of a configuration's goodput,
    hastune.cost.Objective.scale): candidates are ranked and probed by bound × scale, and
    `lower_bound` and the report's are values of that objective, not req/s. `bounds` (pools
    on several GPU types: TypedBounds) gives each configuration's Bounds, or None for one the
    rules cannot bound: it is kept, unbounded, and not among the probes; `fits` (the same:
    the simulator's check) removes, as structural, a configuration it cannot run (more GPUs
    on a type than the cluster has, a TP degree a type's profile lacks)."""
    if margin is None:
        margin = derived_margin(recipe)
    one = Bounds(recipe, profile, reqs) if bounds is None else None
    removed = dict.fromkeys(RULES, 0)
    total = 0
    cands: list[Candidate] = []
    seen_equiv: set[tuple] = set()
    seen: set[tuple] = set()
    for raw in _raw_combos(space, recipe.cluster.gpus):
        total += 1
        try:
            cfg = parse_config(raw)
        except InputError:
            removed["structural"] += 1
            continue
        ident = knob_items(cfg)
        if ident in seen:  # another combination normalised to this config
            removed["equivalent"] += 1
            continue
        seen.add(ident)
        if fits is not None and not fits(cfg):
            removed["structural"] += 1
            continue
        if runnable is not None and not runnable(cfg):
            removed["engine"] += 1
            continue
        if deployable is not None and not deployable(cfg):
            removed["target"] += 1
            continue
        b = one if bounds is None else bounds(cfg)
        if b is None:  # pools on several GPU types: no sound bound, so none is applied
            cands.append(Candidate(cfg, float("inf"), dict(UNBOUNDED)))
            continue
        if not b.memory_ok(cfg):
            removed["memory"] += 1
            continue
        if not b.zero_load_ok(cfg):
            removed["zero_load"] += 1
            continue
        key = archs.of(cfg).equivalent_key(b, cfg)
        if key is not None:
            if key in seen_equiv:
                removed["equivalent"] += 1
                continue
            seen_equiv.add(key)
        st = b.stages(cfg)
        cands.append(Candidate(cfg, min(st.values()), st))

    def worth(c: Candidate, goodput: float) -> float:  # in the objective's units
        return goodput * scale(c.config) if scale is not None else goodput

    cands.sort(key=lambda c: -worth(c, c.bound))
    report = PruneReport(total=total, kept=cands, removed=removed, margin=margin)
    if evaluate is not None and cands and probe_top > 0:
        # probe the best-bounded candidates with distinct GPU allocations
        probed: list[Candidate] = []
        allocs: set[tuple] = set()
        for c in cands:
            a = tuple(getattr(c.config, k) for k in space.gpu_knobs())
            if a in allocs or c.bound == float("inf"):  # an unbounded one is no best bet
                continue
            allocs.add(a)
            probed.append(c)
            if len(probed) >= probe_top:
                break
        values = (evaluate_many([c.config for c in probed]) if evaluate_many is not None
                  else [evaluate(c.config) for c in probed])
        for c, v in zip(probed, values):
            c.goodput = v
        report.lower_bound = max([lower_bound] + [worth(c, c.goodput or 0.0) for c in probed])
        lb = report.lower_bound
        keep = [c for c in cands
                if c.goodput is not None or keeps(recipe, worth(c, c.bound), margin, lb)]
        removed["capacity"] = len(cands) - len(keep)
        report.kept = keep
    return report
