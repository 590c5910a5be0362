"""Conformance: every sampler runs the same loop and keeps the same promises."""

from __future__ import annotations

import json

import optuna
import pytest

from hastune.recipe import load_recipe
from hastune.tune.runner import TuneOptions, Tuner, evaluated_trials
from hastune.tune.samplers import CONSTRAINT, SAMPLERS


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_sampler_conformance(sampler, small_recipe, tmp_path):
    if sampler == "gp" and not _has_torch():
        pytest.skip("the gp sampler needs torch")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tuner = Tuner(load_recipe(small_recipe),
                  TuneOptions(trials=8, sampler=sampler, out=str(tmp_path), seed=1))
    study = tuner.open_study()
    tuner.work(study)
    evals = evaluated_trials(study)
    keys = [t.user_attrs["key"] for t in evals]
    assert len(evals) == 8
    assert len(set(keys)) == len(keys), "a configuration was evaluated twice"
    allowed = tuner.prepared.allowed
    assert all(k in allowed for k in keys), "evaluated a pruned configuration"
    for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        infeasible = t.constraints.get(CONSTRAINT, 0.0) > 0
        assert infeasible == ("reason" in t.user_attrs)
        if infeasible:
            assert t.user_attrs.get("key") not in allowed
    # the recorded configuration is the one the parameters describe
    for t in evals:
        cfg = tuner.pz.suggest(optuna.trial.FixedTrial(t.params))
        assert json.loads(t.user_attrs["key"]) == cfg.model_dump(exclude={"kind", "name"},
                                                                  exclude_none=True)


def test_resuming_in_process_adds_only_new_evaluations(small_recipe, tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    opts = TuneOptions(trials=5, out=str(tmp_path), seed=3)
    t1 = Tuner(load_recipe(small_recipe), opts)
    s1 = t1.open_study()
    t1.work(s1)
    first = {t.number: (t.value, t.user_attrs["key"]) for t in evaluated_trials(s1)}
    opts.trials = 9
    t2 = Tuner(load_recipe(small_recipe), opts)
    s2 = t2.open_study()
    t2.work(s2)
    evals = evaluated_trials(s2)
    assert len(evals) == 9
    for t in evals:
        if t.number in first:
            assert (t.value, t.user_attrs["key"]) == first[t.number]
    assert len({t.user_attrs["key"] for t in evals}) == 9
