"""`hastune.tune.run`: the library tunes as the command does, with the exit code as data."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hastune.errors import InputError
from hastune.tune import Progress, run
from tests.tune.conftest import ROOT, hastune


class Counting(Progress):
    def __init__(self) -> None:
        self.trials: list = []
        self.resumed: int | None = None
        self.stops = 0

    def started(self, tuner, study, resumed: int) -> None:
        self.resumed = resumed

    def trial(self, trial) -> None:
        self.trials.append(trial)

    def stopped(self) -> None:
        self.stops += 1


def test_the_api_and_the_command_find_the_same_answer(small_recipe, tmp_path):
    seen = Counting()
    res = run(small_recipe, trials=6, seed=7, out=str(tmp_path / "api"), plots=False,
              progress=seen)
    cli = hastune("tune", str(small_recipe), "--trials", "6", "--seed", "7", "--no-plots",
                  "--out", str(tmp_path / "cli"), "--json")
    assert cli.returncode == 0, cli.stderr
    s = json.loads(cli.stdout)
    assert res.exit_code == res.summary["exit_code"] == s["exit_code"] == 0
    assert res.goodput_rps == s["goodput_rps"] > 0
    assert res.summary["best_config"] == s["best_config"]
    assert res.best_config.gpus == s["best_gpus"]
    assert res.summary["evaluations"] == s["evaluations"] == 6
    assert seen.resumed == 0 and seen.stops == 1
    assert sum(1 for t in seen.trials if t.user_attrs.get("evaluated")) == 6
    assert json.loads((tmp_path / "api" / "summary.json").read_text()) == res.summary
    assert {f.name for f in res.files} >= {"summary.json", "best_config.yaml", "trials.csv"}

    # resumed with a baseline it falls short of: exit code 4 as data, nothing raised
    base = tmp_path / "base.json"
    base.write_text(json.dumps({**s, "goodput_rps": 2 * s["goodput_rps"]}))
    again = Counting()
    worse = run(small_recipe, trials=6, seed=7, out=str(tmp_path / "api"), plots=False,
                baseline=base, progress=again)
    assert worse.exit_code == 4 and again.resumed == 6 and not again.trials
    assert worse.summary["regression"] == pytest.approx(0.5)
    assert worse.goodput_rps == res.goodput_rps


@pytest.mark.parametrize(("options", "field"), [
    ({"trials": 0}, "--trials"), ({"workers": 0}, "--workers"),
    ({"sampler": "annealing"}, "--sampler"), ({"max_regression": 1.5}, "--max-regression"),
])
def test_bad_options_raise_before_any_work(small_recipe, tmp_path, options, field):
    out = tmp_path / "out"
    with pytest.raises(InputError) as exc:
        run(small_recipe, out=str(out), **options)
    assert exc.value.field == field
    assert not (out / "study.db").exists()


def test_the_example_tunes_from_python(small_recipe, tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "api_tune.py"),
                        str(small_recipe), "3", str(tmp_path / "o")], capture_output=True,
                       text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert f"{s['goodput_rps']:.3f} req/s" in r.stdout and s["evaluations"] == 3
