"""Multi-fidelity tuning, `hastune tune RECIPE --recheck K`: the simulator proposes, the engine
confirms.

After the simulated search the engine (runners/, the real evaluator of
hastune.evaluators.engine) measures
the goodput of the top K distinct configurations of the study — every architecture's trials
ranked together by simulated goodput, leaving out those the engine cannot run (its
architecture modes, tp / pp > 1, more devices than this machine has: each is listed with the
reason). The step timings those runs record re-fit the profile (hastune.calibrate.from_runs,
what `hastune calibrate` does); the recalibrated simulator re-ranks the study's runnable
configurations (at most `pool` of them, the best simulated first); while a configuration not
yet measured enters the top K, it is measured and the profile re-fitted again, for at most
`rounds` rounds. The answer is the best *measured* configuration.

Each measurement is a run record in DIR/recheck/runs/ (the JSON of `hastune evaluate
--evaluator real --json`: valid input of `hastune calibrate`), written when it finishes; a
re-run of the same command reuses the records of the same recipe and seed, so an interrupted
recheck resumes without measuring a configuration twice. The last re-fitted profile is
DIR/recheck/profile.yaml.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hastune.config import parse_config, trial_key
from hastune.errors import InputError
from hastune.goodput import GoodputResult, Probe
from hastune.jsonio import dumps, write_atomic
from hastune.recipe import Recipe
from hastune.tune.runner import evaluated_trials

ROUNDS = 3      # measuring rounds at most (the first, then one per re-ranking that adds some)
POOL = 24       # runnable configurations the recalibrated simulator re-ranks, best first


@dataclass
class Entry:
    """One configuration of the recheck: what the study simulated, what the recalibrated
    simulator says, what the engine measured."""

    config: dict
    key: str
    trial: int | None
    sim_goodput_rps: float
    sim_recalibrated_rps: float | None = None
    measured_goodput_rps: float | None = None
    result: GoodputResult | None = None
    round: int | None = None
    record: str | None = None
    reused: bool = False
    wall_s: float = 0.0
    at_goodput: dict | None = None   # P90 TTFT / TPOT, attainment at the measured goodput

    def as_dict(self) -> dict[str, Any]:
        res = self.result
        out: dict[str, Any] = {
            "config": self.config, "trial": self.trial,
            "sim_goodput_rps": self.sim_goodput_rps,
            "sim_recalibrated_rps": self.sim_recalibrated_rps,
            "measured_goodput_rps": self.measured_goodput_rps,
            "round": self.round, "record": self.record, "reused": self.reused,
            "wall_s": round(self.wall_s, 3), "at_goodput": self.at_goodput,
        }
        if res is not None:
            d = res.as_dict()
            out["probes"] = d.pop("probes")
            out.update({k: v for k, v in d.items() if k not in ("goodput_rps", "criterion",
                                                               "percentile")})
        return out


@dataclass
class Recheck:
    """What `run` found: the entries (measured ones first, best first), the configurations
    the engine cannot run, the profile fits of the last recalibration."""

    entries: list[Entry]
    skipped: list[dict] = field(default_factory=list)
    fits: list[dict] = field(default_factory=list)
    rounds: int = 0
    profile: str | None = None
    stop: str = ""
    wall_s: float = 0.0

    @property
    def measured(self) -> list[Entry]:
        got = [e for e in self.entries if e.measured_goodput_rps is not None]
        return sorted(got, key=lambda e: (-(e.measured_goodput_rps or 0.0),
                                          -e.sim_goodput_rps, e.key))

    @property
    def best(self) -> Entry | None:
        return self.measured[0] if self.measured else None

    def apply(self, summary: dict[str, Any]) -> None:
        """Make the best measured configuration the summary's answer; the simulator's own
        best stays under `simulated_best`."""
        best_cfg = summary.get("best_config")
        sim_key = trial_key(parse_config(best_cfg)) if best_cfg else None
        by_key = {e.key: e for e in self.entries}
        summary["simulated_best"] = {
            "config": summary.get("best_config"), "goodput_rps": summary.get("goodput_rps"),
            "measured_goodput_rps": by_key[sim_key].measured_goodput_rps
            if sim_key in by_key else None}
        summary["recheck"] = [e.as_dict() for e in self.measured]
        summary["recheck_info"] = {"rounds": self.rounds, "stop": self.stop,
                                   "wall_s": round(self.wall_s, 3),
                                   "profile": self.profile, "fits": self.fits,
                                   "not_runnable": self.skipped}
        best = self.best
        if best is None:
            return
        if not best.measured_goodput_rps:
            summary["no_config_reason"] = (
                f"the engine measured none of the {len(self.measured)} rechecked "
                f"configurations meeting the SLOs at any rate (the simulator's best: "
                f"{summary.get('goodput_rps', 0.0):.4g} req/s)")
        gpus = parse_config(best.config).gpus
        g = best.measured_goodput_rps or 0.0
        summary.update({"best_config": best.config, "goodput_rps": g,
                        "goodput_per_gpu": g / gpus if gpus else 0.0, "best_gpus": gpus,
                        "meets_slo": g > 0, "goodput_source": "measured (recheck)"})
        if best.at_goodput is not None:
            summary["at_goodput"] = best.at_goodput
        else:
            summary.pop("at_goodput", None)  # the simulator's, of another configuration


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:10]


def check_recipe(recipe: Recipe, k: int, rounds: int, evaluator: str,
                 engine: str | None) -> None:
    """What makes a recheck impossible, said before the simulated search starts."""
    if k < 0:
        raise InputError(None, "--recheck", f"must be ≥ 0 (got {k})",
                         "give the number of configurations the engine measures, e.g. 3")
    if rounds < 1:
        raise InputError(None, "--recheck-rounds", f"must be ≥ 1 (got {rounds})",
                         "give how many measuring rounds --recheck may run, e.g. 3")
    if k == 0:
        return
    if recipe.objective != "goodput":
        raise InputError(recipe.path, "objective", f"--recheck ranks and answers by measured "
                         f"goodput; objective {recipe.objective} is not rechecked yet",
                         "drop --recheck, or tune with objective: goodput")
    if evaluator != "sim" or engine is not None:
        raise InputError(None, "--recheck", "with --evaluator real every trial is measured "
                         "already", "drop --recheck, or search with the simulator "
                         "(--evaluator sim) and let --recheck measure its best")
    from runners.engine.backend import preflight
    from runners.model.config import get_config

    try:
        get_config(recipe.model)
    except ValueError:
        raise InputError(recipe.path, "model", f"the engine in runners/ cannot serve "
                         f"{recipe.model!r}: --recheck measures on it", "use a preset model "
                         "(ref-tiny, ref-small, ref-base) with a profile measured on this "
                         "machine (examples/reference-cpu.yaml), or drop --recheck") from None
    preflight(recipe.model, "cpu", model_from="model", path=recipe.path)


class Runner:
    """Runs the recheck for a finished study (hastune.tune.runner.Tuner `tuner`)."""

    def __init__(self, tuner: Any, study: Any, k: int, rounds: int = ROUNDS,
                 pool: int = POOL, options: Any = None,
                 on_event: Callable[[str, dict], None] | None = None):
        from hastune.evaluators.profile import resolve_profile

        self.tuner, self.study, self.k = tuner, study, k
        self.rounds, self.pool_size = rounds, pool
        self.recipe: Recipe = tuner.recipe
        self.options = options
        self.on_event = on_event or (lambda kind, info: None)
        self.dir = Path(tuner.opts.out) / "recheck"
        self.base_profile = resolve_profile(self.recipe, quiet=True)[0]
        self.steps: list[dict] = []
        self.result: Recheck | None = None

    def _emit(self, kind: str, **info: Any) -> None:
        self.on_event(kind, info)

    def _real(self, start: float | None = None):
        from hastune.evaluators.engine import RealEvaluation, RealOptions

        o = self.options or RealOptions()
        rec = self.recipe
        if start is not None and start > 0:  # the search starts at the simulator's guess
            rec = rec.model_copy(update={"evaluator": rec.evaluator.model_copy(
                update={"start_rate": start})})
        return RealEvaluation(rec, replace(o), seed=self.recipe.seed)  # its own options

    def candidates(self) -> tuple[list[Entry], list[dict]]:
        """The study's evaluated configurations the engine can run, best simulated first
        (at most `pool`), and the better-ranked ones it cannot run, with why."""
        trials = sorted(evaluated_trials(self.study),
                        key=lambda t: (-(t.value or 0.0), t.number))
        probe = self._real()
        out: list[Entry] = []
        skipped: list[dict] = []
        seen: set[str] = set()
        for t in trials:
            cfg = t.user_attrs.get("config")
            if not cfg or len(out) >= self.pool_size:
                continue
            key = trial_key(parse_config(cfg))
            if key in seen:
                continue
            seen.add(key)
            try:
                probe.check(parse_config(cfg))
            except InputError as exc:
                if len(out) < self.k:  # only those that would have been measured
                    skipped.append({"config": cfg, "trial": t.number,
                                    "sim_goodput_rps": float(t.value or 0.0),
                                    "why": exc.problem})
                continue
            out.append(Entry(cfg, key, t.number, float(t.value or 0.0)))
        return out, skipped

    def _record_path(self, e: Entry) -> Path:
        arch = e.config.get("architecture", "cfg")
        return self.dir / "runs" / f"{arch}-{_digest(e.key)}.json"

    def _reuse(self, e: Entry) -> bool:
        p = self._record_path(e)
        if not p.exists():
            return False
        try:
            rec = json.loads(p.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            return False  # a broken record is measured again (and overwritten)
        if (rec.get("recipe_sha256") != self.tuner.recipe_sha256
                or rec.get("seed") != self.recipe.seed
                or trial_key(parse_config(rec.get("config", {}))) != e.key):
            return False
        e.measured_goodput_rps = float(rec["goodput_rps"])
        e.result = _result_of(rec)
        e.record, e.reused = str(p), True
        e.wall_s = float(rec.get("wall_s", 0.0))
        e.at_goodput = rec.get("at_goodput")
        self.steps.extend(rec.get("engine_steps") or [])
        return True

    def measure(self, e: Entry, rnd: int) -> None:
        import time

        e.round = rnd
        if self._reuse(e):
            self._emit("reused", entry=e)
            return
        guess = e.sim_recalibrated_rps or e.sim_goodput_rps
        ev = self._real(guess)
        self._emit("measure", entry=e)
        t0 = time.perf_counter()
        cfg = parse_config(e.config)
        res = ev.goodput(cfg, on_probe=lambda p: self._emit("probe", entry=e, probe=p))
        e.wall_s = time.perf_counter() - t0
        e.measured_goodput_rps, e.result = res.goodput_rps, res
        rec = res.as_dict()
        rec.update({"config": e.config, "architecture": cfg.architecture, "gpus": cfg.gpus,
                    "seed": self.recipe.seed, "evaluator": "real", "wall_s": e.wall_s,
                    "recipe": self.recipe.name, "recipe_sha256": self.tuner.recipe_sha256,
                    "trial": e.trial, "sim_goodput_rps": e.sim_goodput_rps})
        if res.best_run is not None:
            e.at_goodput = {k: v for k, v in res.best_run.summary(self.recipe.slo).items()
                            if k in ("ttft_p90_s", "tpot_p90_s", "attainment", "utilisation")}
            rec["at_goodput"] = e.at_goodput
        rec.update(ev.describe())
        self.steps.extend(rec.get("engine_steps") or [])
        p = self._record_path(e)
        write_atomic(p, dumps(rec))
        e.record = str(p)
        self._emit("measured", entry=e)

    def recalibrate(self, pool: list[Entry]) -> list[dict]:
        """Re-fit the profile from every step recorded so far, write it, and re-simulate
        the pool with it."""
        from hastune.calibrate.from_runs import recalibrate, write_profile
        from hastune.evaluators.sim import Evaluation

        probes = [s["workers"] for s in self.steps if s.get("workers")]
        if not probes:
            return []
        prof, fits = recalibrate(self.base_profile, probes, seed=self.recipe.seed)
        path = self.dir / "profile.yaml"
        write_profile(prof, path, f"# Re-fitted by `hastune tune --recheck` from "
                      f"{sum(f.rows for f in fits)} engine steps of {len(probes)} probes "
                      f"(DIR/recheck/runs/*.json; `hastune calibrate` re-fits the same).\n")
        self.profile_path = str(path)
        ev = Evaluation(self.recipe, profile=prof)
        for i, e in enumerate(pool):
            self._emit("resimulate", entry=e, done=i, total=len(pool))
            e.sim_recalibrated_rps = ev.goodput(parse_config(e.config)).goodput_rps
        return [f.as_dict() for f in fits]

    def run(self) -> Recheck:
        import time

        t0 = time.perf_counter()
        try:
            return self._run()
        finally:
            if self.result is not None:
                self.result.wall_s = time.perf_counter() - t0

    def _run(self) -> Recheck:
        pool, skipped = self.candidates()
        out = self.result = Recheck(pool, skipped)
        self.profile_path = None
        if not pool:
            out.stop = "the engine can run none of the evaluated configurations"
            return out

        def refit() -> None:
            out.fits = self.recalibrate(pool)

        out.rounds, out.stop = rounds_of(pool, self.k, self.rounds, self.measure, refit,
                                         lambda r, new: self._emit("round", round=r, new=new))
        out.profile = self.profile_path
        return out


def recheck_stage(tuner: Any, study: Any, k: int, rounds: int, summary: dict,
                  on_event: Callable[[str, dict], None] | None = None
                  ) -> tuple[GoodputResult | None, InputError | None]:
    """Run the recheck, make its best measured configuration the summary's answer, and
    return that configuration's measured GoodputResult (None if nothing was measured) and
    the InputError that stopped it, if one did (the engine could not start, say): what was
    measured before it is kept, and the caller writes the outputs before raising it."""
    runner = Runner(tuner, study, k, rounds=rounds, on_event=on_event)
    error = None
    try:
        got = runner.run()
    except InputError as exc:
        error, got = exc, runner.result
    if got is None:  # it stopped before it had candidates
        summary["recheck_info"] = {"error": str(error)}
        return None, error
    if error is not None:
        got.stop = f"stopped by an error: {error.problem}"
    got.apply(summary)
    return (got.best.result if got.best is not None else None), error


def rank(e: Entry) -> tuple:
    """Best first: by the recalibrated simulator where it has spoken, else the study's; ties
    by trial number, as the study's best (hastune.tune.outputs.best_trial) breaks them, so the
    first round measures the configuration the summary names best (on a coarse rate grid many
    trials tie: the reference recipe on a 25% grid has six at 55.5 req/s)."""
    sim = e.sim_goodput_rps if e.sim_recalibrated_rps is None else e.sim_recalibrated_rps
    return (-sim, -e.sim_goodput_rps, float("inf") if e.trial is None else e.trial, e.key)


def rounds_of(pool: list[Entry], k: int, rounds: int, measure: Callable[[Entry, int], None],
              refit: Callable[[], None],
              on_round: Callable[[int, list[Entry]], None] = lambda r, new: None
              ) -> tuple[int, str]:
    """The recheck's loop: measure the top `k` of `pool` not yet measured, re-fit (which
    re-ranks the pool), and again while a configuration not measured enters the top `k`, at
    most `rounds` times. Returns the rounds that measured and why it stopped."""
    done = 0
    for rnd in range(1, rounds + 1):
        new = [e for e in sorted(pool, key=rank)[:k] if e.measured_goodput_rps is None]
        if not new:
            return done, f"round {rnd}: the recalibrated top {k} are all measured"
        on_round(rnd, new)
        for e in new:
            measure(e, rnd)
        done = rnd
        refit()
    if all(e.measured_goodput_rps is not None for e in sorted(pool, key=rank)[:k]):
        return done, f"the recalibrated top {k} are all measured"
    return done, f"{rounds} rounds (the bound; the recalibrated top {k} hold unmeasured ones)"


def _result_of(rec: dict) -> GoodputResult:
    """A GoodputResult from a run record's JSON (the probes' verdicts, no runs)."""
    pct = float(rec.get("percentile", 90))
    tag = "p90" if pct == 90 else f"p{pct:g}"
    probes = [Probe(float(p["rate"]), float(p.get(f"ttft_{tag}_s", 0.0)),
                    float(p.get(f"tpot_{tag}_s", 0.0)), float(p.get("attainment", 0.0)),
                    bool(p.get("passed")), bool(p.get("slo_met", True)),
                    requests=int(p.get("requests", 0)), phase=str(p.get("phase", "fine")))
              for p in rec.get("probes", [])]
    return GoodputResult(float(rec["goodput_rps"]), str(rec.get("criterion", "percentile")),
                         pct, float(rec.get("tolerance", 0.1)), probes,
                         bracketed=bool(rec.get("bracketed", True)),
                         early_stopped=bool(rec.get("early_stopped", False)),
                         spread=tuple(rec["spread_rps"]) if rec.get("spread_rps") else None)
