"""Search spaces: which deployment configs a tuner may try, per architecture, as YAML.

A space lists GPU counts as ranges (bounded by the recipe's budget G) and every other knob as a
finite list of values, so the space is finite: it can be enumerated (`hastune grid`), pruned
exhaustively, and no configuration need ever be evaluated twice.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hastune import archs
from hastune.config import AnyConfig, knob_items, parse_config
from hastune.errors import InputError, from_pydantic, named_by
from hastune.yamlio import read_yaml_mapping

SPACES_DIR = Path(__file__).resolve().parent.parent / "search_spaces"
# GPU-knob combinations a space may ask to enumerate at the recipe's budget (~1 µs each): more
# is a space too wide for its cluster (e.g. three unbounded pools at thousands of GPUs)
MAX_ALLOCATION_COMBOS = 10_000_000


def gpus_used(architecture: str, values: dict[str, int]) -> int:
    """GPUs a configuration with these knob values takes (its architecture's `gpu_terms`: a
    sum of products, one term per pool; a knob not given counts 1)."""
    total = 0
    for term in archs.get(architecture).gpu_terms:
        prod = 1
        for k in term:
            prod *= int(values.get(k, 1))
        total += prod
    return total


class IntRange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    low: int = Field(ge=0)
    high: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if self.high is not None and self.high < self.low:
            raise ValueError(f"high ({self.high}) < low ({self.low}). Fix: make low ≤ high")
        return self


class SearchSpace(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    architecture: str
    budget: Literal["exact", "at_most"] = "exact"
    params: dict[str, IntRange | list[Any]]
    source: str | None = Field(default=None, exclude=True)  # the file it was read from

    @field_validator("architecture")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in archs.NAMES:
            raise ValueError(f"unknown architecture {v!r}. Fix: use one of "
                             f"{', '.join(archs.NAMES)}")
        return v

    @field_validator("params")
    @classmethod
    def _nonempty(cls, v: dict[str, IntRange | list[Any]]) -> dict[str, IntRange | list[Any]]:
        for k, x in v.items():
            if isinstance(x, list) and not x:
                raise ValueError(f"params.{k} lists no values. Fix: give at least one value")
            for item in x if isinstance(x, list) else ():
                if isinstance(item, float) and not math.isfinite(item):
                    raise ValueError(f"params.{k} lists {item}. Fix: use finite numbers "
                                     "(not .nan or .inf)")
        return v

    @model_validator(mode="after")
    def _knobs(self) -> SearchSpace:
        arch = archs.get(self.architecture)
        fields = set(arch.config.model_fields) - {"kind", "name", "architecture"}
        for k, x in self.params.items():
            if k not in fields:
                raise ValueError(f"params.{k}: {self.architecture} has no knob {k!r}. Fix: use "
                                 f"knobs of {self.architecture}: {', '.join(sorted(fields))}")
            if k in arch.gpu_knobs:
                if isinstance(x, list) and not all(
                        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in x):
                    raise ValueError(f"params.{k} is a GPU count: its values must be whole "
                                     "numbers ≥ 0. Fix: e.g. [1, 2, 4] or {low: 1, high: 8}")
            elif isinstance(x, IntRange):
                raise ValueError(f"params.{k} is not a GPU count: a range applies only to "
                                 f"{', '.join(arch.gpu_knobs)}. Fix: list its values, e.g. "
                                 "[1, 2, 4]")
        return self

    def int_range(self, name: str, budget: int) -> range:
        r = self.params.get(name)
        if not isinstance(r, IntRange):
            raise ValueError(f"{name} must be a range")
        hi = budget if r.high is None else min(r.high, budget)
        return range(r.low, hi + 1)

    def knob_values(self, name: str, budget: int) -> list[int]:
        """The values a GPU knob may take: its range (capped by the budget) or its list; a
        knob the space does not list is fixed at 1 (e.g. pp)."""
        v = self.params.get(name)
        if v is None:
            return [1]
        if isinstance(v, IntRange):
            return list(self.int_range(name, budget))
        return [int(x) for x in v]

    def gpus_of(self, values: dict[str, int]) -> int:
        return gpus_used(self.architecture, values)

    def derive(self, values: dict[str, int], budget: int) -> int | None:
        """With `budget: exact`, the value of the last GPU knob that makes the total exactly
        the budget (None if no allowed value does)."""
        last = self.gpu_knobs()[-1]
        coef, rest = 1, 0
        for term in archs.get(self.architecture).gpu_terms:
            prod = 1
            for k in term:
                if k != last:
                    prod *= int(values.get(k, 1))
            if last in term:
                coef = prod
            else:
                rest += prod
        left = budget - rest
        if coef <= 0 or left < 0 or left % coef:
            return None
        v = left // coef
        return v if v in self.knob_values(last, budget) else None

    def choices(self, name: str) -> list[Any]:
        v = self.params[name]
        return list(v) if isinstance(v, list) else []

    def other_knobs(self) -> list[str]:
        return [k for k in self.params if k not in self.gpu_knobs()]

    def gpu_knobs(self) -> tuple[str, ...]:
        """GPU knobs this space sets (a knob it leaves out keeps the config's default)."""
        return tuple(k for k in archs.get(self.architecture).gpu_knobs if k in self.params)

    def allocations(self, budget: int) -> Iterator[tuple[int, ...]]:
        """GPU counts per pool within the budget (exactly G or at most G)."""
        names = self.gpu_knobs()
        counts = [len(self.int_range(n, budget)) if isinstance(self.params[n], IntRange)
                  else len(self.params[n]) for n in names]  # type: ignore[arg-type]
        if math.prod(counts) > MAX_ALLOCATION_COMBOS:
            raise InputError(
                self.source, "params",
                f"{' × '.join(map(str, counts))} = {math.prod(counts):,} combinations of "
                f"{', '.join(names)} at cluster.gpus = {budget} (the most enumerated is "
                f"{MAX_ALLOCATION_COMBOS:,})", "bound the GPU knobs' ranges with high: (or "
                "list their values) in a search space of your own (search_space: in the recipe)")
        ranges = [self.knob_values(n, budget) for n in names]
        for combo in itertools.product(*ranges):
            total = self.gpus_of(dict(zip(names, combo)))
            if total > budget or (self.budget == "exact" and total != budget) or total == 0:
                continue
            yield combo

    def configs(self, budget: int) -> Iterator[AnyConfig]:
        """Every valid configuration, once (structurally invalid combinations are skipped, and
        combinations a config normalises to one — a pool's TP degree without the pool — give
        it once)."""
        others = self.other_knobs()
        seen: set[tuple] = set()
        for alloc in self.allocations(budget):
            base = dict(zip(self.gpu_knobs(), alloc))
            for values in itertools.product(*(self.choices(k) for k in others)):
                d = {"architecture": self.architecture, **base, **dict(zip(others, values))}
                try:
                    cfg = parse_config(d)
                except InputError:
                    continue  # e.g. s > 0 with n_P = 0
                key = knob_items(cfg)
                if key not in seen:
                    seen.add(key)
                    yield cfg

    def size(self, budget: int) -> int:
        return sum(1 for _ in self.configs(budget))

    def with_knobs(self, knobs: dict[str, list[Any]]) -> SearchSpace:
        """This space with `knobs` added where it does not list them (what a target engine
        needs: Architecture.target_knobs); a knob the space lists keeps its values."""
        new = {k: v for k, v in knobs.items() if k not in self.params}
        if not new:
            return self
        return self.model_copy(update={"params": {**self.params, **new}})

    def for_profile(self, profile: Any) -> SearchSpace:
        """This space as the profile allows it: for a profile without expert-parallel sections
        (a dense model's) each expert-parallel switch keeps only its off values, so a space
        listing `expert_parallel: [false, true]` searches a dense model exactly as one without
        it (the same configurations, the same sampler parameters). A switch listing only on
        values is left as it is: its configurations are then refused by name
        (Architecture.check). MoE profiles: the space as it is."""
        if profile.ep_variants:
            return self
        params = dict(self.params)
        for k in archs.get(self.architecture).ep_knobs:
            v = params.get(k)
            if isinstance(v, list) and any(x is True for x in v):
                off = [x for x in v if x is not True]
                if off:
                    params[k] = off
        if params == self.params:
            return self
        return self.model_copy(update={"params": params})


def on_types(space: SearchSpace, types: list[str]) -> SearchSpace:
    """`space` on a cluster of these GPU types (its first type first): with several, each
    pool's type is a knob (the first type as null, as a config names it) and the budget is
    at most the cluster's GPUs, not all of them (a deployment need not use every type)."""
    if len(types) < 2:
        return space
    knobs = archs.get(space.architecture).config.type_knobs
    out = space.with_knobs({k: [None, *types[1:]] for k in knobs})
    return out.model_copy(update={"budget": "at_most"})


def load_space(path: str | Path) -> SearchSpace:
    data = read_yaml_mapping(path, "search space")
    try:
        space = SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise from_pydantic(path, exc, model=SearchSpace) from None
    return space.model_copy(update={"source": str(Path(path).resolve())})


def space_for(architecture: str, recipe_path: str | None = None,
              override: str | None = None, profile: Any = None) -> SearchSpace:
    """The space a recipe tunes: its `search_space` file, else the shipped default; with the
    recipe's `profile`, as that profile allows it (`SearchSpace.for_profile`)."""
    space = _space_for(architecture, recipe_path, override)
    return space if profile is None else space.for_profile(profile)


def _space_for(architecture: str, recipe_path: str | None,
               override: str | None) -> SearchSpace:
    if override:
        p = Path(override)
        if not p.is_absolute() and recipe_path:
            p = Path(recipe_path).resolve().parent / p
        if not os.path.exists(p):  # False, not OSError, for a name too long for a path
            raise InputError(recipe_path, "search_space", f"search space {override} not found",
                             "give a path relative to the recipe, or remove the field")
        try:
            space = load_space(p)
        except InputError as exc:  # the space file, and the recipe that names it
            raise named_by(exc, recipe_path, "search_space") from None
        if space.architecture == architecture:
            return space
        # a recipe's space for another architecture: fall back to the shipped one
    p = SPACES_DIR / f"{architecture}.yaml"
    if not p.exists():
        raise InputError(recipe_path, "architecture", f"no search space for {architecture!r}",
                         f"add search_spaces/{architecture}.yaml")
    return load_space(p)
