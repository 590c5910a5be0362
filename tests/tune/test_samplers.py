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


def _lookup_tuner(small_recipe, tmp_path, **kw):
    """A tuner whose evaluations are a deterministic function of the configuration (fast:
    these tests check the search loop, not the simulator)."""
    from tests.fakes import LookupEvaluator

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rec = load_recipe(small_recipe)
    return Tuner(rec, TuneOptions(out=str(tmp_path), storage="memory", **kw),
                 evaluator=LookupEvaluator(rec))


def test_warm_start_tries_distinct_allocations_before_variants(small_recipe, tmp_path):
    tuner = _lookup_tuner(small_recipe, tmp_path, trials=1)
    study = tuner.open_study()
    prep = tuner.prepare(study)
    knobs = ("n_E", "n_P", "n_D")
    allocs = [tuple(d[k] for k in knobs) for d in prep.survivors]
    n = len(set(allocs))
    assert n < len(allocs), "the test needs allocations with several surviving variants"
    assert len(set(allocs[:n])) == n, "a variant came before some allocation's first"
    warm = [tuple(d[k] for k in knobs) for d in prep.warm]  # the study's warm_start
    assert warm and len(warm) == len(set(warm)), "the warm start repeated an allocation"


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_repeated_suggestions_are_repaired_not_accumulated(sampler, small_recipe, tmp_path):
    tuner = _lookup_tuner(small_recipe, tmp_path, trials=30, sampler=sampler, seed=2)
    study = tuner.open_study()
    tuner.work(study)
    evals = evaluated_trials(study)
    assert len(evals) == min(30, len(tuner.prepared.allowed))
    # every suggestion that teaches nothing (a duplicate, a pruned point) is followed by an
    # enqueued survivor, the nearest unevaluated one, instead of by another suggestion
    trials = sorted(study.get_trials(), key=lambda t: t.number)
    repeats = [t for t in trials[:-1] if t.user_attrs.get("duplicate")
               or t.user_attrs.get("reason") in ("pruned", "infeasible")]
    assert repeats, "the test needs the sampler to have repeated itself"
    for t in repeats:
        nxt = trials[t.number + 1]
        assert "fixed_params" in nxt.system_attrs, (t.number, nxt.user_attrs)
        assert nxt.user_attrs.get("evaluated"), (t.number, nxt.user_attrs)


def test_distance_orders_by_position_and_separates_architectures(small_recipe, tmp_path):
    from hastune.config import parse_config

    tuner = _lookup_tuner(small_recipe, tmp_path)
    base = dict(architecture="epd", n_E=1, n_P=1, n_D=2, B=1, s=0.5)
    a = parse_config(base)
    near = parse_config({**base, "B": 2})
    far = parse_config({**base, "B": 8})
    assert tuner.pz.distance(a, a) == 0.0
    assert 0 < tuner.pz.distance(a, near) < tuner.pz.distance(a, far)
    assert tuner.pz.distance(a, near) == tuner.pz.distance(near, a)


def test_multi_architecture_study_survives_narrowing(tmp_path):
    """Pruning removes some tp / pp values; narrowing the parametrization to the survivors
    must not change a categorical parameter's choices mid-study (optuna refuses that)."""
    from pathlib import Path

    recipe = (Path(__file__).resolve().parents[2] / "examples" / "ecoserve"
              / "a800-llama-sharegpt.yaml")
    tuner = _lookup_tuner(recipe, tmp_path, trials=12, seed=0)
    study = tuner.open_study()
    tuner.work(study)
    evals = evaluated_trials(study)
    assert len(evals) == 12
    assert {t.user_attrs["config"]["architecture"] for t in evals} >= {"padg", "nodg"}
