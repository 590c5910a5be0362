"""Samplers for stage 2. Adding one is one entry in SAMPLERS.

`tpe` (optuna TPESampler, default), `gp` (optuna GPSampler; needs torch), `random` (optuna
RandomSampler) are optuna samplers with constraints: every trial sets the constraint
`infeasible` (optuna 5's `Trial.set_constraint`; > 0 is violated), so a trial whose
configuration was pruned or is infeasible ranks below every feasible trial instead of being
read by the surrogate as zero goodput. `skopt` is scikit-optimize's
GP through ask/tell, restricted to surviving configurations by its `space_constraint`; its
suggestions enter the optuna study (the record) as enqueued trials.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna

from hastune.errors import InputError
from hastune.tune.params import Parametrization

CONSTRAINT = "infeasible"


def is_infeasible(trial: optuna.trial.FrozenTrial) -> bool:
    return trial.constraints.get(CONSTRAINT, 0.0) > 0


def _tpe(seed: int, startup: int) -> optuna.samplers.BaseSampler:
    # constant_liar: trials running in other workers count as bad guesses, so concurrent
    # workers spread out instead of proposing around the same point (no effect alone)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True,
                                      constant_liar=True)


def _gp(seed: int, startup: int) -> optuna.samplers.BaseSampler:
    try:
        import torch  # noqa: F401  (GPSampler needs it; fail here with a clear message)
    except ImportError:
        raise InputError(None, "--sampler", "the gp sampler needs PyTorch, which is not installed",
                         "pip install 'hastune[torch]' (CPU: torch==2.13.0), or use --sampler tpe"
                         ) from None
    import warnings

    with warnings.catch_warnings():  # deterministic_objective is marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup,
                                         deterministic_objective=True)


def _random(seed: int, startup: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed)


SAMPLERS: dict[str, Callable[[int, int], optuna.samplers.BaseSampler]] = {
    "tpe": _tpe,
    "gp": _gp,
    "random": _random,
    "skopt": _random,  # the study's own sampler only fills what skopt did not enqueue
}


def make_sampler(name: str, seed: int, startup: int = 5) -> optuna.samplers.BaseSampler:
    if name not in SAMPLERS:
        raise InputError(None, "--sampler", f"unknown sampler {name!r}",
                         f"use one of {', '.join(SAMPLERS)}")
    return SAMPLERS[name](seed, startup)


class SkoptProposer:
    """scikit-optimize GP over the same parametrization, re-synced from the study each time
    (so resumes and other workers' trials inform it)."""

    def __init__(self, pz: Parametrization, seed: int, allowed: Callable[[Any], bool],
                 startup: int = 5):
        from skopt import Optimizer
        from skopt.space import Integer

        self.pz = pz
        self.allowed = allowed
        dims = pz.skopt_dims()

        verdicts: dict[tuple[int, ...], bool] = {}

        def ok(point: list[int]) -> bool:  # called for thousands of candidates per ask
            key = tuple(int(x) for x in point)
            v = verdicts.get(key)
            if v is None:
                _, cfg = pz.from_point(list(key))
                v = verdicts[key] = cfg is not None and allowed(cfg)
            return v

        self.opt = Optimizer([Integer(0, len(v) - 1, name=n) for n, v in dims],
                             base_estimator="GP", n_initial_points=startup,
                             acq_optimizer="sampling", random_state=seed,
                             space_constraint=ok)
        self.seen: set[int] = set()            # trial numbers read
        self.told: set[tuple[int, ...]] = set()  # points told (each once)

    def sync(self, study: optuna.Study) -> None:
        from hastune.config import parse_config

        xs, ys = [], []
        for t in study.get_trials(deepcopy=False,
                                  states=(optuna.trial.TrialState.COMPLETE,)):
            if t.number in self.seen or is_infeasible(t) or not t.user_attrs.get("evaluated"):
                continue
            self.seen.add(t.number)
            pt = self.pz.to_point(parse_config(t.user_attrs["config"]))
            if pt is not None and tuple(pt) not in self.told:
                self.told.add(tuple(pt))
                xs.append(pt)
                ys.append(-float(t.value or 0.0))  # skopt minimises
        if xs:
            self.opt.tell(xs, ys)

    def propose(self, study: optuna.Study, done: dict[str, float]) -> dict[str, Any] | None:
        """Parameters of skopt's next point, or None when it offers nothing new (it re-offers
        an evaluated point, or its random fallback lands outside the survivors)."""
        import warnings

        self.sync(study)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "evaluated at point ... before"
            point = [int(x) for x in self.opt.ask()]
        params, cfg = self.pz.from_point(point)
        if tuple(point) in self.told or cfg is None or not self.allowed(cfg):
            return None
        return params
