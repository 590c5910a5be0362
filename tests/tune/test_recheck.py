"""`hastune tune --recheck K` (hastune/tune/recheck.py): the loop's properties on generated
pools, the summary it writes, its run records (reused on a re-run, never a stale or broken
one), the input errors said before any search, and one real recheck on the engine."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.config import parse_config, trial_key
from hastune.goodput import GoodputResult, Probe
from hastune.recipe import load_recipe
from hastune.tune.recheck import Entry, Recheck, Runner, rank, rounds_of
from tests.tune.conftest import ROOT, hastune

REF = ROOT / "examples" / "reference-cpu.yaml"
CFG = {"architecture": "nodg", "replicas": 2, "tp": 1, "pp": 1}


def _entry(i: int, sim: float) -> Entry:
    cfg = {**CFG, "chunk_tokens": 64 * (i + 1)}
    return Entry(cfg, trial_key(parse_config(cfg)), i, sim)


@st.composite
def pools(draw):
    n = draw(st.integers(1, 10))
    # goodputs on a rate grid tie: some draws from a few values
    value = st.one_of(st.floats(0.0, 100.0), st.sampled_from([10.0, 55.5]))
    sims = draw(st.lists(value, min_size=n, max_size=n))
    truth = draw(st.lists(st.floats(0.0, 100.0), min_size=n, max_size=n))
    rounds = draw(st.integers(1, 4))
    # what the recalibrated simulator says after each round
    refits = draw(st.lists(st.lists(st.floats(0.0, 100.0), min_size=n, max_size=n),
                           min_size=rounds, max_size=rounds))
    return sims, truth, draw(st.integers(1, 4)), rounds, refits


@settings(max_examples=200, deadline=None)
@given(pools())
def test_the_loop_measures_the_simulators_best_and_never_twice(case):
    sims, truth, k, rounds, refits = case
    pool = [_entry(i, s) for i, s in enumerate(sims)]
    # the study's best as the summary names it (outputs.best_trial: ties to the first trial)
    sim_best = max(pool, key=lambda e: (e.sim_goodput_rps, -e.trial))
    calls: list[int] = []

    def measure(e: Entry, rnd: int) -> None:
        calls.append(e.trial)
        e.measured_goodput_rps, e.round = truth[e.trial], rnd

    done_refits = []

    def refit() -> None:
        vals = refits[len(done_refits)]
        done_refits.append(1)
        for i, e in enumerate(pool):
            e.sim_recalibrated_rps = vals[i]

    done, stop = rounds_of(pool, k, rounds, measure, refit)
    assert len(calls) == len(set(calls)), "a configuration was measured twice"
    assert 1 <= done <= rounds and len(calls) <= k * rounds
    assert sim_best.trial in calls, "the simulator's own best was not measured"
    top = sorted(pool, key=rank)[:k]
    if "the bound" not in stop:  # it stopped because the re-ranked top k are all measured
        assert all(e.measured_goodput_rps is not None for e in top)
    res = Recheck(pool)
    best = res.best
    assert best is not None
    assert best.measured_goodput_rps == max(truth[c] for c in calls)
    assert best.measured_goodput_rps >= sim_best.measured_goodput_rps


def _summary(cfg: dict, goodput: float) -> dict:
    return {"best_config": cfg, "goodput_rps": goodput, "goodput_per_gpu": goodput / 2,
            "best_gpus": 2, "meets_slo": goodput > 0, "at_goodput": {"ttft_p90_s": 0.1}}


@given(st.lists(st.floats(0.0, 50.0), min_size=1, max_size=6))
def test_the_answer_is_the_best_measured_and_the_simulators_stays_said(measured):
    pool = [_entry(i, 100.0 - i) for i in range(len(measured))]
    for e, m in zip(pool, measured):
        e.measured_goodput_rps = m
    summary = _summary(pool[0].config, 100.0)
    Recheck(pool).apply(summary)
    best = max(measured)
    assert summary["goodput_rps"] == best
    assert summary["meets_slo"] == (best > 0)
    assert summary["simulated_best"]["goodput_rps"] == 100.0
    assert summary["simulated_best"]["measured_goodput_rps"] == measured[0]
    assert [r["measured_goodput_rps"] for r in summary["recheck"]] == sorted(measured,
                                                                             reverse=True)
    if best == 0:
        assert "none of the" in summary["no_config_reason"]
    assert "ttft_p90_s" not in summary.get("at_goodput", {})  # not the simulator's figures


class FakeReal:
    """A real evaluator that measures goodput 10 on every configuration, without an engine."""

    def __init__(self, calls: list):
        self.calls = calls

    def goodput(self, config, on_probe=None):
        self.calls.append(config)
        p = Probe(10.0, 0.1, 0.01, 1.0, True, requests=20)
        if on_probe:
            on_probe(p)
        return GoodputResult(10.0, "percentile", 90.0, 0.1, [p], spread=(10.0, 11.0))

    def describe(self) -> dict:
        return {"backend": "fake"}


def _runner(tmp_path: Path, sha: str = "abc") -> Runner:
    tuner = SimpleNamespace(recipe=load_recipe(REF), opts=SimpleNamespace(out=str(tmp_path)),
                            recipe_sha256=sha)
    return Runner(tuner, None, k=1)


def test_a_record_is_reused_only_for_the_same_recipe_and_seed(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(Runner, "_real", lambda self, start=None: FakeReal(calls))
    r = _runner(tmp_path)
    e = _entry(0, 20.0)
    r.measure(e, 1)
    assert len(calls) == 1 and Path(e.record).exists()
    rec = json.loads(Path(e.record).read_text())
    assert rec["goodput_rps"] == 10.0 and rec["recipe_sha256"] == "abc"
    again = _entry(0, 20.0)
    _runner(tmp_path).measure(again, 1)
    assert len(calls) == 1 and again.reused and again.measured_goodput_rps == 10.0
    assert again.result.spread == (10.0, 11.0)  # the noise figures come back too
    other = _entry(0, 20.0)
    _runner(tmp_path, sha="another recipe").measure(other, 1)
    assert len(calls) == 2 and not other.reused
    Path(other.record).write_text("{ not json")
    broken = _entry(0, 20.0)
    _runner(tmp_path, sha="another recipe").measure(broken, 1)
    assert len(calls) == 3 and not broken.reused
    assert json.loads(Path(broken.record).read_text())["goodput_rps"] == 10.0


@pytest.mark.parametrize("args, words", [
    (["examples/audio-ultravox-8xa100.yaml", "--recheck", "2"], "cannot serve"),
    (["examples/reference-cpu.yaml", "--recheck", "1", "--evaluator", "real"],
     "measured already"),
    (["examples/reference-cpu.yaml", "--recheck", "-1"], "--recheck"),
    (["examples/reference-cpu.yaml", "--recheck", "1", "--recheck-rounds", "0"],
     "--recheck-rounds"),
])
def test_what_cannot_be_rechecked_is_said_before_the_search(tmp_path, args, words):
    out = tmp_path / "out"
    res = hastune("tune", *args, "-o", str(out), timeout=120)
    assert res.returncode == 2, res.stderr
    assert words in res.stderr
    assert not (out / "study.db").exists()  # nothing searched


def test_a_recheck_on_the_engine_measures_the_simulators_best(tmp_path):
    """The reference recipe on this machine's cores, its goodput searched on a 25% grid in
    at most three probes (the engine's share of the CI run: ≈ 70 s with the defaults)."""
    rec = yaml.safe_load(REF.read_text())
    rec["profile"] = str(ROOT / "profiles" / "cpu" / "ref-small-1core.yaml")
    rec["evaluator"] = {"tolerance": 0.25, "max_probes": 3}
    recipe = tmp_path / "reference-cpu.yaml"
    recipe.write_text(yaml.safe_dump(rec))
    out = tmp_path / "out"
    args = ["tune", str(recipe), "--recheck", "1", "--recheck-rounds", "1", "--no-plots",
            "--json", "-o", str(out)]
    res = hastune(*args, timeout=400)
    assert res.returncode in (0, 3), res.stderr
    s = json.loads(res.stdout)
    assert (res.returncode == 0) == s["meets_slo"]
    assert len(s["recheck"]) == 1
    r = s["recheck"][0]
    assert r["config"] == s["simulated_best"]["config"]  # the simulator's own best
    assert s["goodput_rps"] == r["measured_goodput_rps"] and r["probes"]
    assert s["goodput_source"].startswith("measured")
    # the record is `hastune calibrate`'s input; the re-fitted profile loads
    cal = hastune("calibrate", r["record"], "--profile",
                  str(ROOT / "profiles/cpu/ref-small-1core.yaml"), "--out",
                  str(tmp_path / "cal.yaml"), timeout=120)
    assert cal.returncode == 0, cal.stderr
    from hastune.profile import load_profile

    assert load_profile(Path(s["recheck_info"]["profile"])).decode.fixed_s > 0
    again = hastune(*args, timeout=200)  # resumes: nothing measured twice
    s2 = json.loads(again.stdout)
    assert s2["recheck"][0]["reused"] and s2["goodput_rps"] == s["goodput_rps"]


def test_an_engine_error_keeps_what_was_measured_before_it(tmp_path, monkeypatch):
    import io

    from rich.console import Console

    from hastune.cli.tune_view import RecheckView
    from hastune.errors import InputError
    from hastune.tune.recheck import recheck_stage

    calls: list = []

    class Failing(FakeReal):
        def goodput(self, config, on_probe=None):
            if calls:
                raise InputError(None, "model", "the engine could not start", "fix it")
            return super().goodput(config, on_probe)

    pool = [_entry(i, 30.0 - i) for i in range(3)]
    monkeypatch.setattr(Runner, "_real", lambda self, start=None: Failing(calls))
    monkeypatch.setattr(Runner, "candidates", lambda self: (pool, []))
    tuner = SimpleNamespace(recipe=load_recipe(REF), opts=SimpleNamespace(out=str(tmp_path)),
                            recipe_sha256="abc")
    summary = _summary(pool[0].config, 30.0)
    out = io.StringIO()
    result, error = recheck_stage(tuner, None, 3, 2, summary,
                                  RecheckView(Console(file=out), 3, True))
    assert isinstance(error, InputError) and result is not None
    assert [r["measured_goodput_rps"] for r in summary["recheck"]] == [10.0]
    assert "stopped by an error" in summary["recheck_info"]["stop"]
    assert summary["goodput_rps"] == 10.0 and "measured 10.000 req/s" in out.getvalue()
