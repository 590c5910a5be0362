"""Conformance of evaluators (hastune.evaluators): every registered one and a fake keep the
Evaluator protocol's promises, and the tuner uses whatever evaluator it is given — asking it
what it can run instead of importing the engine."""

from __future__ import annotations

import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.config import parse_config
from hastune.errors import InputError
from hastune.evaluators import EVALUATORS, Evaluator, EvaluatorOptions, make_evaluator
from hastune.recipe import load_recipe
from hastune.tune.runner import TuneOptions, Tuner, evaluated_trials
from tests.fakes import LookupEvaluator

OVER = {"architecture": "epd", "n_E": 4, "n_P": 4, "n_D": 4, "B": 1, "s": 0.5}   # 12 > 8
FITS = {"architecture": "epd", "n_E": 2, "n_P": 2, "n_D": 4, "B": 2, "s": 0.5}


@pytest.fixture
def audio(root):
    return load_recipe(root / "examples" / "audio-ultravox-8xa100.yaml")


def _evaluators(recipe):
    evs = [make_evaluator(n, recipe, EvaluatorOptions(requests=200)) for n in EVALUATORS]
    return evs + [LookupEvaluator(recipe)]


def test_every_evaluator_keeps_the_protocol(audio):
    for ev in _evaluators(audio):
        assert isinstance(ev, Evaluator), f"{type(ev).__name__} lacks part of the protocol"
        assert ev.name and ev.seed == audio.seed
        assert isinstance(ev.describe(), dict)
        over = parse_config(OVER)
        with pytest.raises(InputError):
            ev.check(over, "over.yaml")
        assert not ev.runnable(over), f"{ev.name}: runnable() disagrees with check()"
        ev.close()


def test_unknown_evaluator_names_the_known_ones(audio):
    with pytest.raises(InputError, match="sim, real"):
        make_evaluator("bogus", audio)
    with pytest.raises(InputError, match="--evaluator real"):
        make_evaluator("sim", audio, EvaluatorOptions(backend="ray"))


def test_engine_limits_are_the_evaluators_not_the_tuners(audio):
    """The real evaluator refuses what the engine cannot run (here a config whose
    architecture has no engine mode); the simulator runs it."""
    fudg = parse_config({"architecture": "fudg", "prefill_instances": 2, "decode_instances": 2})
    real = make_evaluator("real", audio)
    sim = make_evaluator("sim", audio, EvaluatorOptions(requests=200))
    assert not real.runnable(fudg)
    assert sim.runnable(fudg)


def test_simulator_goodput_is_deterministic_for_a_seed(audio):
    cfg = parse_config(FITS)
    a = make_evaluator("sim", audio, EvaluatorOptions(requests=300, seed=4))
    b = make_evaluator("sim", audio, EvaluatorOptions(requests=300, seed=4))
    assert a.goodput(cfg).goodput_rps == b.goodput(cfg).goodput_rps > 0


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), banned=st.sampled_from(["s0", "B1", "nP0"]))
def test_tuner_evaluates_only_what_its_evaluator_runs(small_recipe, tmp_path_factory, seed,
                                                      banned):
    """A fake evaluator that refuses a generated class of configs: the tuner never asks it to
    evaluate one, counts them under the `engine` rule, and records exactly its values."""
    rule = {"s0": lambda c: "no s 0" if getattr(c, "s", 1) == 0 else None,
            "B1": lambda c: "no B 1" if getattr(c, "B", 0) == 1 else None,
            "nP0": lambda c: "no n_P 0" if c.n_P == 0 else None}[banned]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rec = load_recipe(small_recipe)
    fake = LookupEvaluator(rec, refuse=rule)
    tuner = Tuner(rec, TuneOptions(trials=6, out=str(tmp_path_factory.mktemp("t")),
                                   storage="memory", seed=seed), evaluator=fake)
    study = tuner.open_study()
    tuner.work(study)
    evals = evaluated_trials(study)
    assert evals, "nothing was evaluated"
    assert len(fake.calls) == len(set(fake.calls)), "a configuration was evaluated twice"
    for t in evals:
        cfg = parse_config(__import__("json").loads(t.user_attrs["key"]))
        assert rule(cfg) is None, f"evaluated a config the evaluator refuses: {cfg}"
        assert t.value == pytest.approx(fake.value(cfg))
    assert tuner.prepared.report["rules"]["engine"] > 0
