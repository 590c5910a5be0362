"""How a search space becomes sampler parameters, and back.

GPU counts are integer ranges; with `budget: exact` the last pool takes what is left, so it is
not sampled. Evenly spaced numeric lists (s = 0, 0.25, …) become stepped ranges that samplers can
order; other lists (B = 1, 2, 4, 8) become categories; single values are fixed. With several
architectures, an `architecture` parameter chooses, and knob names get the architecture as a
prefix (`<architecture>.B`), so each keeps its own distribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hastune.config import AnyConfig, parse_config
from hastune.errors import InputError
from hastune.space import SearchSpace

Config = AnyConfig


@dataclass(frozen=True)
class Param:
    name: str        # sampler-facing name
    knob: str        # config field
    kind: str        # "int" | "step" | "cat"
    low: float = 0
    high: float = 0
    step: float = 1
    choices: tuple = ()

    def values(self) -> list[Any]:
        if self.kind == "int":
            return list(range(int(self.low), int(self.high) + 1))
        if self.kind == "step":
            n = round((self.high - self.low) / self.step)
            return [round(self.low + i * self.step, 12) for i in range(n + 1)]
        return list(self.choices)


def _list_param(name: str, knob: str, values: list[Any]) -> Param | None:
    if len(values) == 1:
        return None
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        vs = sorted(values)
        steps = {round(b - a, 12) for a, b in zip(vs, vs[1:])}
        if len(steps) == 1 and vs == list(values):
            step = steps.pop()
            if all(isinstance(v, int) for v in vs):
                return Param(name, knob, "int", vs[0], vs[-1], step)
            return Param(name, knob, "step", float(vs[0]), float(vs[-1]), step)
    return Param(name, knob, "cat", choices=tuple(values))


class Parametrization:
    def __init__(self, spaces: dict[str, SearchSpace], budget: int):
        self.spaces = spaces
        self.budget = budget
        self.archs = list(spaces)
        self.multi = len(self.archs) > 1
        self.params: dict[str, list[Param]] = {}
        self.fixed: dict[str, dict[str, Any]] = {}
        self.derived: dict[str, str | None] = {}
        for arch, sp in spaces.items():
            pre = f"{arch}." if self.multi else ""
            ps: list[Param] = []
            gpu = sp.gpu_knobs()
            self.derived[arch] = gpu[-1] if sp.budget == "exact" else None
            fixed = {}
            for k in gpu:
                if k == self.derived[arch]:
                    continue
                if isinstance(sp.params[k], list):  # e.g. tp: [1, 2, 4, 8]
                    p = _list_param(pre + k, k, sp.choices(k))
                    if p is None:
                        fixed[k] = sp.choices(k)[0]
                    else:
                        ps.append(p)
                    continue
                r = sp.int_range(k, budget)
                ps.append(Param(pre + k, k, "int", r.start, r.stop - 1))
            for k in sp.other_knobs():
                p = _list_param(pre + k, k, sp.choices(k))
                if p is None:
                    fixed[k] = sp.choices(k)[0]
                else:
                    ps.append(p)
            self.params[arch] = ps
            self.fixed[arch] = fixed

    def narrowed(self, configs: list[Config]) -> Parametrization:
        """The same parametrization on the smallest box holding `configs` (pruning's
        survivors) in its ranges (lists stay whole): fewer suggestions land on pruned
        configurations. An architecture with no configuration left keeps its space (parameter
        names must not change mid-study)."""
        spaces: dict[str, SearchSpace] = {}
        for arch, sp in self.spaces.items():
            mine = [c for c in configs if c.architecture == arch]
            if not mine:
                spaces[arch] = sp
                continue
            params: dict[str, Any] = {}
            for k, v in sp.params.items():
                vals = [getattr(c, k) for c in mine]
                if isinstance(v, list):
                    # a list is kept whole: narrowing it would change a categorical
                    # parameter's choices (or its kind) within the study, which optuna refuses
                    params[k] = v
                else:
                    params[k] = {"low": min(vals), "high": max(vals)}
            spaces[arch] = sp.model_copy(update={"params": SearchSpace.model_validate(
                {"architecture": arch, "budget": sp.budget, "params": params}).params})
        return Parametrization(spaces, self.budget)

    # -- optuna ---------------------------------------------------------------------------
    def suggest(self, trial: Any) -> Config | None:
        """Define-by-run suggestion; None when the point is not a valid configuration."""
        arch = trial.suggest_categorical("architecture", self.archs) if self.multi \
            else self.archs[0]
        values: dict[str, Any] = {}
        for p in self.params[arch]:
            if p.kind == "int":
                values[p.knob] = trial.suggest_int(p.name, int(p.low), int(p.high),
                                                   step=int(p.step))
            elif p.kind == "step":
                values[p.knob] = trial.suggest_float(p.name, p.low, p.high, step=p.step)
            else:
                values[p.knob] = trial.suggest_categorical(p.name, list(p.choices))
        return self.build(arch, values)

    def build(self, arch: str, values: dict[str, Any]) -> Config | None:
        d = {"architecture": arch, **self.fixed[arch], **values}
        der = self.derived[arch]
        sp = self.spaces[arch]
        if der is not None:
            v = sp.derive(d, self.budget)  # the GPU count need not be a plain sum (tp × pp × n)
            if v is None:
                return None
            d[der] = v
        elif sp.gpus_of(d) > self.budget:
            return None
        try:
            return parse_config(d)
        except InputError:
            return None

    def to_params(self, cfg: Config) -> dict[str, Any]:
        """Sampler parameters that reproduce `cfg` (for enqueueing a warm start)."""
        out: dict[str, Any] = {"architecture": cfg.architecture} if self.multi else {}
        for p in self.params[cfg.architecture]:
            out[p.name] = getattr(cfg, p.knob)
        return out

    def distance(self, a: Config, b: Config) -> float:
        """How far apart two configurations are in the sampler's coordinates: each parameter
        contributes its difference as a share of its range (ordered lists by position, other
        categories 0 or 1); different architectures are farther apart than any two of one."""
        if a.architecture != b.architecture:
            return float(len(self.params[a.architecture]) + 1)
        d = 0.0
        for p in self.params[a.architecture]:
            va, vb = getattr(a, p.knob), getattr(b, p.knob)
            if va == vb:
                continue
            vals = p.values()
            ordered = p.kind != "cat" or all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)
            if ordered and va in vals and vb in vals and len(vals) > 1:
                d += abs(vals.index(va) - vals.index(vb)) / (len(vals) - 1)
            else:
                d += 1.0
        return d

    # -- scikit-optimize -------------------------------------------------------------------
    def skopt_dims(self) -> list[tuple[str, list[Any]]]:
        """One (name, values) per dimension; values index an Integer dimension."""
        dims: list[tuple[str, list[Any]]] = []
        if self.multi:
            dims.append(("architecture", list(self.archs)))
        for arch in self.archs:
            for p in self.params[arch]:
                dims.append((p.name, p.values()))
        return dims

    def from_point(self, point: list[int]) -> tuple[dict[str, Any], Config | None]:
        dims = self.skopt_dims()
        named = {name: vals[i] for (name, vals), i in zip(dims, point)}
        arch = named["architecture"] if self.multi else self.archs[0]
        params = {p.name: named[p.name] for p in self.params[arch]}
        if self.multi:
            params["architecture"] = arch
        values = {p.knob: named[p.name] for p in self.params[arch]}
        return params, self.build(arch, values)

    def to_point(self, cfg: Config) -> list[int] | None:
        params = self.to_params(cfg)
        point = []
        for name, vals in self.skopt_dims():
            v = params.get(name, vals[0])
            if v not in vals:
                return None
            point.append(vals.index(v))
        return point
