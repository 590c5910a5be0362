"""The fidelity scorecard: every measured case simulated, the engine terms fitted per
(engine, GPU) with folds that leave whole (isl × osl) shapes out, errors per case and in
aggregate (median and P90 of |error|, bias = median signed error; by engine, TP and
concurrency)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hastune import engine_terms as et
from hastune.fidelity import fit as F
from hastune.fidelity.harness import harness
from hastune.fidelity.rows import Case, read_cases
from hastune.fidelity.run import ROUNDS, overdrawn, prefill_of, recipe_for, simulate

MIN_ROWS = 40   # the Done-when bar applies to engines with at least this many rows
FOLDS = 4
# How the terms are shared (Fitter.table): "gpu" — a set per (engine, GPU) of at least
# MIN_GROUP_ROWS rows (the engine's pooled one on the others); "engine" — one set
# per engine, every GPU; "kernel" — one per engine but a kernel scale per GPU; "client" — one
# per engine but the front end's fixed part per benchmark client (harness.client) over every
# engine; "client-kernel" — that, with a kernel scale per (engine, GPU); "clients",
# "clients-kernel" — those, with the wait per request in flight per client too; "models" — a
# set per (engine, GPU) whose rows come from at least MIN_MODELS models, the engine's one set
# (fitted on all its rows) on a GPU with fewer: per GPU only what the rows support
SHARES = ("gpu", "engine", "kernel", "client", "client-kernel", "clients", "clients-kernel",
          "models")
MIN_MODELS = 2
# "gpu": an (engine, GPU) whose rows are fewer gets its engine's pooled terms, not a set of its
# own — five or six terms fitted on a handful of rows explain those rows and nothing else (held
# out of silicon_train.csv, Llama-3.1-8B left TensorRT-LLM's H100 terms to gpt-oss's 5 rows
# there: TTFT +295%, TPOT +370% on its 177). The shipped groups hold 45–177 rows.
MIN_GROUP_ROWS = 30
SHARE = "gpu"
REFINE = 1     # Gauss-Newton steps after the fit from the first forms (at fit.START)


@dataclass
class Scored:
    case: Case
    fit_ttft: float = float("nan")   # simulated with the terms fitted on all its group
    fit_tpot: float = float("nan")
    cv_ttft: float = float("nan")    # simulated with the terms of the fold that left it out
    cv_tpot: float = float("nan")
    kernels_ttft: float = float("nan")  # kernels and scheduler only (no fitted terms)
    kernels_tpot: float = float("nan")


@dataclass
class Scorecard:
    rows: list[Scored]
    terms: dict[tuple[str, str], np.ndarray]
    folds: dict[tuple[str, str], list[list[str]]]
    wall_s: float = 0.0


def _err(sim: float, meas: float) -> float:
    return sim / meas - 1.0


def stats(errs: list[float]) -> dict[str, float]:
    e = np.asarray([x for x in errs if np.isfinite(x)])
    if not len(e):
        return {"n": 0}
    return {"n": int(len(e)), "median_abs_pct": float(np.median(np.abs(e)) * 100),
            "p90_abs_pct": float(np.percentile(np.abs(e), 90) * 100),
            "bias_pct": float(np.median(e) * 100)}


def fold_shapes(cases: list[Case], k: int = FOLDS) -> list[list[str]]:
    """Whole (isl × osl) shapes into k folds, round-robin in sorted order (deterministic)."""
    shapes = sorted({c.shape for c in cases}, key=lambda s: tuple(map(int, s.split("x"))))
    k = max(2, min(k, len(shapes)))
    return [shapes[i::k] for i in range(k)]


def _ticker(progress: Callable[[str, int, int], None] | None, total: int):
    done = [0]

    def tick(what: str) -> bool:
        done[0] += 1
        if progress:
            progress(what, done[0], max(total, done[0]))
        return True

    return tick


def run(path: str | Path, models: dict[str, str] | None = None, rounds: int = ROUNDS,
        only: Callable[[Case], bool] | None = None,
        progress: Callable[[str, int, int], None] | None = None,
        refine: int = REFINE, prefill: bool = False, share: str | None = None) -> Scorecard:
    t0 = time.perf_counter()
    path = Path(path)
    cases = [c for c in read_cases(path) if only is None or only(c)]
    groups: dict[tuple[str, str], list[Case]] = defaultdict(list)
    for c in cases:
        groups[c.group].append(c)
    card = Scorecard([Scored(c) for c in cases], {}, {})
    scored = {id(r.case): r for r in card.rows}
    tick = _ticker(progress, len(cases) * (2 + 5 * (1 + refine * (FOLDS + 1))))
    fitter = Fitter(cases, models or {}, path, rounds, refine, prefill, tick, share=share)
    for g, members in groups.items():
        _group(card, scored, g, members, fitter, tick)
    card.wall_s = time.perf_counter() - t0
    return card


class Fitter:
    """The cases a fit may use, each with its profile, recipe and its engine's scheduler on
    its GPU, and the fit itself: the linear forms (cached by case and point), the terms
    fitted on any subset of the cases (`fitted`, cached by the subset), and the table of terms
    a set of cases gives (`table`: per (engine, GPU), and per engine the GPU whose terms apply
    where it has none). The one place terms are fitted: `hastune fidelity`'s scorecard and
    `--write` (the shipped terms) and its cross-validation by model or GPU
    (hastune.fidelity.cv) all fit through it. A case whose profile cannot be built (no model
    config, no such TP degree) is left out, with why (`unsupported`)."""

    def __init__(self, cases: list[Case], models: dict[str, str], path: Path,
                 rounds: int = ROUNDS, refine: int = REFINE, prefill: bool = False,
                 tick=None, strict: bool = True, share: str | None = None):
        from hastune.errors import InputError
        from hastune.evaluators.profile import resolve_profile

        self.refine, self.prefill = refine, prefill
        self.share = share or SHARE
        if self.share not in SHARES:
            raise ValueError(f"share must be one of {SHARES}, not {self.share!r}")
        self.tick = tick or (lambda what: True)
        self.cases: list[Case] = []
        self.unsupported: dict[int, str] = {}
        self._sims: dict[int, tuple] = {}
        self._forms: dict[tuple, F.Form] = {}
        self._fits: dict[frozenset, np.ndarray] = {}
        self._arch: dict[str, str] = {}  # model name → its architecture (`architecture`)
        profiles: dict[tuple, object] = {}
        for c in cases:
            try:
                rec = recipe_for(c, models, path, rounds)
                key = (rec.model, c.weights, c.gpu, c.engine, rec.precision.kv_cache)
                if key not in profiles:
                    profiles[key] = resolve_profile(rec, quiet=True)[0]
                prof = profiles[key]
                prefill_of(c, prof)  # the TP (and EP) or attention-DP rank the row needs
                why = overdrawn(c, prof)
                if why:  # a measurement no run of full prefills can follow
                    raise InputError(path, f"line {c.line}: silicon_ttft_ms, silicon_tpot_ms",
                                     why, "drop the row, or score the file with --shipped "
                                     "or --cv, which leave such rows out with why")
            except (InputError, ValueError) as exc:
                if strict:
                    raise
                self.unsupported[c.line] = " ".join(str(exc).split())
                continue
            sched = et.scheduler_defaults(c.engine, prof.memory.gpu_bytes / 2**30, c.gpu)
            self._sims[c.line] = (prof, rec, sched)
            if c.model not in self._arch:
                self._arch[c.model] = architecture_of(rec.model)
            self.cases.append(c)

    def architecture(self, c: Case) -> str:
        """The architecture `c`'s model shares with any other checkpoint of the same shape
        (`architecture_of`): what `--cv model` holds out together, and what the "models"
        sharing counts."""
        return self._arch[c.model]

    def sched(self, c: Case) -> et.Scheduler:
        return self._sims[c.line][2]

    def terms(self, c: Case, theta) -> et.EngineTerms:
        """The terms `theta` as case `c` is simulated with them: its benchmark client's
        queueing too (hastune.fidelity.harness, by its silicon_data_source)."""
        return F.terms(c.engine, c.gpu, self.sched(c), theta, queued=harness(c).queued)

    def sim(self, c: Case, terms: et.EngineTerms):
        prof, rec, _ = self._sims[c.line]
        return simulate(c, prof, terms, rec), float(c.clients - 1)

    def run(self, c: Case, theta):
        """The case simulated with terms `theta` (fit.NAMES)."""
        return self.sim(c, self.terms(c, theta))[0]

    def form(self, c: Case, at=None) -> F.Form:
        at = F.START if at is None else np.asarray(at, dtype=float)
        key = (c.line, tuple(float(x) for x in at))
        if key not in self._forms:
            self.tick(f"{c.engine} {c.gpu}: linear forms")
            self._forms[key] = F.form(lambda t: self.sim(c, t), self.sched(c), c.engine, at,
                                      c.gpu, self.prefill, harness(c).queued)
        return self._forms[key]

    def fitted(self, rows: list[Case]) -> np.ndarray:
        """Fit on `rows` from their first forms (at fit.START), then `refine` Gauss-Newton
        steps: the forms of these rows again around the terms found, and a fit on those."""
        return self.fitted_by(rows, lambda c: "")[""]

    def fitted_by(self, rows: list[Case], cls: Callable[[Case], str]) -> dict[str, np.ndarray]:
        """`fitted` with a kernel scale of its own per class of the rows (`cls`: a GPU) and
        the other terms shared: {class: terms}."""
        names = sorted({cls(c) for c in rows})
        where = [names.index(cls(c)) for c in rows]
        key = (frozenset(c.line for c in rows), tuple(where) if len(names) > 1 else ())
        if key not in self._fits:
            mt = np.array([c.ttft_ms for c in rows])
            mp = np.array([c.tpot_ms for c in rows])
            ths = F.fit_shared([self.form(c, F.START) for c in rows], mt, mp, where,
                               prefill=self.prefill)
            for _ in range(self.refine):
                ths = F.fit_shared([self.form(c, ths[w]) for c, w in zip(rows, where)], mt, mp,
                                   where, start=ths, prefill=self.prefill)
            self._fits[key] = dict(zip(names, ths))
        return self._fits[key]

    def fitted_split(self, rows: list[Case], split: dict[int, Callable[[Case], object]]
                     ) -> dict[int, np.ndarray]:
        """One fit over `rows` with each term in `split` (its index in fit.NAMES → a case's
        class) fitted per class, the rest shared, then `refine` Gauss-Newton steps: {line:
        the row's terms}."""
        where = {}
        for j, f in split.items():
            names = sorted({str(f(c)) for c in rows})
            where[j] = [names.index(str(f(c))) for c in rows]
        key = (frozenset(c.line for c in rows),
               tuple(sorted((j, tuple(w)) for j, w in where.items())))
        if key not in self._fits:
            mt = np.array([c.ttft_ms for c in rows])
            mp = np.array([c.tpot_ms for c in rows])
            ths = F.fit_split([self.form(c, F.START) for c in rows], mt, mp, where,
                              prefill=self.prefill)
            for _ in range(self.refine):
                ths = F.fit_split([self.form(c, t) for c, t in zip(rows, ths)], mt, mp, where,
                                  start=ths, prefill=self.prefill)
            self._fits[key] = {c.line: t for c, t in zip(rows, ths)}
        return self._fits[key]

    def table(self, rows: list[Case]) -> Table:
        """The terms these rows give (`share`): one set per (engine, GPU) of their rows
        ("gpu"), one per engine for all its GPUs ("engine"), or one per engine with a kernel
        scale per GPU ("kernel"); and per engine the GPU whose terms apply on a GPU it has no
        rows on (its GPU with the most rows, as hastune.engine_terms.terms_for takes
        engine_fitted.POOLED)."""
        groups: dict[tuple[str, str], list[Case]] = defaultdict(list)
        for c in rows:
            groups[c.group].append(c)
        pooled: dict[str, str] = {}
        for (e, g), m in sorted(groups.items()):
            if e not in pooled or len(m) > len(groups[(e, pooled[e])]):
                pooled[e] = g
        fe: dict[str, float] = {}
        stream: dict[tuple[str, str], float] = {}
        if self.share == "gpu":  # a GPU with too few rows for its own terms: the pooled ones
            terms = {g: self.fitted(m) for g, m in sorted(groups.items())
                     if len(m) >= MIN_GROUP_ROWS or pooled[g[0]] == g[1]}
        elif self.share == "models":
            terms = {}
            for (e, g), m in sorted(groups.items()):
                if len({self.architecture(c) for c in m}) >= MIN_MODELS:
                    terms[(e, g)] = self.fitted(m)
                else:  # one model's rows: the engine's terms, fitted on all its rows
                    terms[(e, g)] = self.fitted([c for c in rows if c.engine == e])
        elif self.share.startswith("client"):
            # one joint fit: the engine's terms shared over its models (and GPUs, or a kernel
            # scale per GPU), the front end's fixed part per benchmark client, over engines
            from hastune.fidelity.harness import client

            eng = {j: (lambda c: c.engine) for j in (1, 2, 4, 5)}
            eng[0] = (lambda c: c.group) if self.share.endswith("-kernel") else \
                (lambda c: c.engine)
            eng[3] = client
            if self.share.startswith("clients"):
                eng[4] = lambda c: (c.engine, client(c))
            th = self.fitted_split(rows, eng)
            terms = {}
            for c in rows:
                terms.setdefault(c.group, th[c.line])
                fe.setdefault(client(c), float(th[c.line][3]))
                if self.share.startswith("clients"):
                    stream.setdefault((c.engine, client(c)), float(th[c.line][4]))
        else:
            terms = {}
            for e in sorted(pooled):
                mine = [c for c in rows if c.engine == e]
                by = self.fitted_by(mine, (lambda c: c.gpu) if self.share == "kernel"
                                    else (lambda c: ""))
                for (e2, g) in groups:
                    if e2 == e:
                        terms[(e, g)] = by[g] if self.share == "kernel" else by[""]
        counts: dict[str, int] = defaultdict(int)
        if fe:
            from hastune.fidelity.harness import client

            for c in rows:
                counts[client(c)] += 1
        return Table(dict(sorted(terms.items())), pooled,
                     {g: len(m) for g, m in groups.items()},
                     {g: max(c.clients for c in m) for g, m in groups.items()}, fe,
                     max(counts, key=lambda k: counts[k]) if counts else "", stream)


@dataclass
class Table:
    """Fitted terms (fit.NAMES) per (engine, GPU), and per engine the GPU whose terms apply
    where it has none (`pooled`)."""

    terms: dict[tuple[str, str], np.ndarray]
    pooled: dict[str, str]
    rows: dict[tuple[str, str], int]
    clients_max: dict[tuple[str, str], int]
    # the front end's fixed part per benchmark client (harness.client), where it is fitted
    # per client, and the client with the most rows (whose applies to a client not fitted)
    frontend: dict[str, float] = field(default_factory=dict)
    most: str = ""
    # the wait per request in flight per (engine, client), where fitted so
    stream: dict[tuple[str, str], float] = field(default_factory=dict)

    def theta(self, c: Case) -> np.ndarray | None:
        """The terms case `c` gets: its (engine, GPU)'s, else its engine's pooled ones, else
        None (no rows of its engine); the front end of its client where fitted per client."""
        if c.group in self.terms:
            th = self.terms[c.group]
        elif c.engine in self.pooled:
            th = self.terms[(c.engine, self.pooled[c.engine])]
        else:
            return None
        if self.frontend:
            from hastune.fidelity.harness import client

            th = th.copy()
            th[3] = self.frontend.get(client(c), self.frontend[self.most])
            th[4] = self.stream.get((c.engine, client(c)), th[4])
        return th


def architecture_of(config: str) -> str:
    """A model's architecture, as the kernels see it: its config's model family and the shape
    of its layers (layers, hidden size, heads, KV heads, head size, FFN, experts, experts per
    token, an expert's FFN). Checkpoints of one architecture — DeepSeek-R1, DeepSeek-V3 and
    their NVFP4 quantisations; an fp8 and a bf16 Llama-3.1-8B — run the same kernels at
    their precision, so a cross-validation that holds one out holds them all out."""
    from hastune.models.hf import load_model

    arch = load_model(config)
    llm = arch.llm
    return (f"{arch.family}: {llm.layers}L "
            f"{llm.hidden}h {llm.heads}/{llm.kv_heads}x{llm.head_dim} ffn{llm.ffn} "
            f"{llm.experts}e{llm.experts_per_token}x{llm.moe_ffn}")


def _group(card: Scorecard, scored: dict, g: tuple[str, str], members: list[Case],
           fitter: Fitter, tick) -> None:
    """One (engine, GPU): the first forms (at fit.START), the folds' fits and checks, the fit
    on all."""
    label = f"{g[0]} {g[1]}"
    for c in members:
        fitter.form(c, F.START)  # the forms every fit starts from
    # the kernels alone: no engine overheads and no front end (what `terms: false` leaves)
    kernels = {c.line: fitter.run(c, F.PRIOR) for c in members}
    folds = fold_shapes(members)
    card.folds[g] = folds
    for shapes in folds:
        th = fitter.fitted([c for c in members if c.shape not in shapes])
        for c in (c for c in members if c.shape in shapes):
            s = fitter.run(c, th)
            r = scored[id(c)]
            r.cv_ttft, r.cv_tpot = s.ttft_ms, s.tpot_ms
            tick(f"{label}: cross-validation")
    theta = fitter.fitted(members)
    card.terms[g] = theta
    for c in members:
        s = fitter.run(c, theta)
        r = scored[id(c)]
        r.fit_ttft, r.fit_tpot = s.ttft_ms, s.tpot_ms
        r.kernels_ttft, r.kernels_tpot = kernels[c.line].ttft_ms, kernels[c.line].tpot_ms
        tick(f"{label}: fitted")


def aggregate(card: Scorecard) -> dict:
    """Errors by engine (and all), by engine and GPU, by engine, GPU and isl × osl shape (what
    a cross-validation fold leaves out whole), by TP and by concurrency, for the fitted,
    cross-validated and kernels-only simulations."""
    out: dict = {}
    keys = {"engine": lambda c: c.engine, "engine_gpu": lambda c: f"{c.engine}@{c.gpu}",
            "shape": lambda c: f"{c.engine}@{c.gpu} {c.shape}",
            "tp": lambda c: f"tp{c.tp}", "clients": lambda c: f"c{c.clients}"}
    for name, key in keys.items():
        groups: dict[str, list[Scored]] = defaultdict(list)
        for r in card.rows:
            groups[key(r.case)].append(r)
        out[name] = {k: _block(v) for k, v in sorted(groups.items())}
    out["all"] = _block(card.rows)
    return out


def _block(rows: list[Scored]) -> dict:
    b = {"rows": len(rows)}
    for kind in ("cv", "fit", "kernels"):
        b[kind] = {"ttft": stats([_err(getattr(r, f"{kind}_ttft"), r.case.ttft_ms) for r in rows]),
                   "tpot": stats([_err(getattr(r, f"{kind}_tpot"), r.case.tpot_ms) for r in rows])}
    return b


def passes(agg: dict) -> dict[str, bool]:
    """The issue's bar per engine with ≥ MIN_ROWS rows: cross-validated median |error| ≤ 20%
    (TTFT) and ≤ 8% (TPOT), bias within ±10% for both."""
    out = {}
    for eng, b in agg["engine"].items():
        if b["rows"] < MIN_ROWS:
            continue
        t, p = b["cv"]["ttft"], b["cv"]["tpot"]
        out[eng] = (t["median_abs_pct"] <= 20 and p["median_abs_pct"] <= 8
                    and abs(t["bias_pct"]) <= 10 and abs(p["bias_pct"]) <= 10)
    return out
