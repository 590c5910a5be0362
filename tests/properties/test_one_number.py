"""Item 4 of issue 9: one number per configuration. `evaluate`, `grid`, `tune` (and pruning's
probes inside it) give a configuration the same goodput, wherever their searches start; every
config file hastune writes parses back to an equal config, `null` included."""

from __future__ import annotations

import json

import yaml
from hypothesis import given, settings

from hastune.config import dump_config, load_config, parse_config, trial_key
from hastune.evaluators.sim import Evaluation
from hastune.space import SPACES_DIR, load_space
from hastune.tune.runner import TuneOptions, Tuner, evaluated_trials
from tests.conftest import QUICK
from tests.generated import recipes

ARCHS = ("epd", "epd-static", "padg", "nodg", "fudg")


@settings(max_examples=5)
@given(rec=recipes(ARCHS, requests=(150, 300), evaluator=QUICK))
def test_tune_and_evaluate_give_a_configuration_one_goodput(rec, tmp_path_factory):
    out = tmp_path_factory.mktemp("tune")
    tuner = Tuner(rec, TuneOptions(trials=6, out=str(out), storage="memory", seed=1))
    study = tuner.open_study()
    tuner.work(study)
    fresh = Evaluation(rec)
    for t in evaluated_trials(study):
        cfg = parse_config(t.user_attrs["config"])
        assert t.value == fresh.goodput(cfg).goodput_rps, (t.user_attrs, t.value)
        # a search that starts elsewhere (as a tuner's incumbent would make it) agrees
        for start in (0.5 * (t.value or 1.0), 3.0 * (t.value or 1.0)):
            assert fresh.goodput(cfg, incumbent=start).goodput_rps == t.value


def _space_configs():
    for path in sorted(SPACES_DIR.glob("*.yaml")):
        sp = load_space(path)
        for budget in (3, 8, 16):
            yield from sp.configs(budget)


def test_every_configuration_of_every_shipped_space_round_trips(tmp_path):
    seen = 0
    nulls = 0
    for cfg in _space_configs():
        # the YAML file hastune writes (best_config.yaml), read back as a user would
        p = tmp_path / "c.yaml"
        p.write_text(yaml.safe_dump(dump_config(cfg), sort_keys=False))
        assert load_config(p) == cfg, cfg
        # the JSON a study keeps (its survivors, every trial's config)
        stored = json.loads(trial_key(cfg))
        assert parse_config(stored) == cfg, stored
        nulls += any(v is None for v in cfg.model_dump().values())
        seen += 1
    assert seen > 1000 and nulls > 0  # the nodg chunk_tokens: null variants are in there


def test_grid_reports_the_goodput_evaluate_gives(audio_recipe, tmp_path):
    from hastune.tune.grid import run_grid

    data = yaml.safe_load((audio_recipe.path and open(audio_recipe.path).read()) or "")
    data["cluster"]["gpus"] = 3
    data["workload"]["requests"] = 200
    data["evaluator"] = dict(QUICK)
    data["architecture"] = ["epd", "nodg"]
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(data))
    res = run_grid(p, prune_first=True)
    from hastune.recipe import load_recipe

    ev = Evaluation(load_recipe(p))
    assert res["evaluated"] > 5
    for row in res["results"][:6]:
        cfg = parse_config(row["config"])
        assert ev.goodput(cfg).goodput_rps == row["goodput_rps"], row
    nodg_null = [r for r in res["results"] if r["config"]["architecture"] == "nodg"
                 and r["config"]["chunk_tokens"] is None]
    assert nodg_null, "a nodg config without chunking kept its null"
