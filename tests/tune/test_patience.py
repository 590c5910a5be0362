"""`tune --patience P`: the search stops once P evaluations in a row (in the order they were
told to the study) did not raise the best goodput, and the summary says why it stopped. On
generated goodput tables (a lookup evaluator: any configuration's value is a hash of it and the
seed) the stop comes at the first such stall that the evaluations still under way (at most
--in-flight − 1) do not break; without --patience the study runs to --trials."""

from __future__ import annotations

import hashlib

import optuna
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.recipe import load_recipe
from hastune.tune.runner import TuneOptions, Tuner, evaluated_trials
from tests.fakes import LookupEvaluator


def _tune(recipe, seed: int, patience: int | None, in_flight: int, trials: int = 25):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rec = load_recipe(recipe)
    ev = LookupEvaluator(rec, seed=seed)
    ev.value = lambda cfg: 1.0 + int(hashlib.sha256(f"{seed}:{ev.key(cfg)}".encode())
                                     .hexdigest()[:8], 16) % 997 / 100
    tuner = Tuner(rec, TuneOptions(trials=trials, storage="memory", seed=seed,
                                   patience=patience, in_flight=in_flight, workers=1,
                                   out=str(recipe.parent / f"o{seed}")), evaluator=ev)
    study = tuner.open_study(0)
    tuner.work(study)
    vals = [float(t.value) for t in sorted(evaluated_trials(study), key=lambda t: t.number)]
    return tuner, vals


def _since(vals: list[float]) -> list[int]:
    """After each evaluation (pruning's probes first), how many in a row had not raised the
    best."""
    best, since, out = 0.0, 0, []
    for v in vals:
        best, since = (v, 0) if v > best else (best, since + 1)
        out.append(since)
    return out


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # the file is only read
@given(seed=st.integers(0, 10_000), patience=st.integers(2, 6), in_flight=st.integers(1, 3))
def test_patience_stops_at_a_stall_and_says_so(small_recipe, seed, patience, in_flight):
    """Once `patience` evaluations in a row have not raised the best, nothing more is
    proposed; the Q − 1 evaluations at most still under way are told, and if one of them
    raises the best the search goes on. So the study ends stalled, and every earlier stall
    was followed, within Q − 1 evaluations, by a new best."""
    tuner, vals = _tune(small_recipe, seed, patience, in_flight)
    since = _since(vals)
    if since[-1] < patience:  # never stalled at the end: ran to --trials (or the space)
        assert tuner.stop_reason.startswith(("trials", "space")), tuner.stop_reason
        return
    assert tuner.stop_reason.startswith("patience"), tuner.stop_reason
    assert f"--patience {patience})" in tuner.stop_reason
    assert f"{max(vals):.4g}" in tuner.stop_reason
    for i, s in enumerate(since[:-1]):
        if s == patience:  # a stall: the end, or a new best among what was under way
            after = since[i + 1:i + in_flight]
            assert i + in_flight >= len(vals) or 0 in after, (vals, i)


def test_without_patience_the_study_runs_to_its_trials(small_recipe):
    tuner, vals = _tune(small_recipe, 3, None, 2, trials=15)
    assert len(vals) == 15 and tuner.stop_reason.startswith("trials")
