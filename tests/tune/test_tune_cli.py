"""`hastune tune` end to end: outputs, kill -9 and resume, two workers, exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import optuna
import yaml

from hastune.config import load_config
from tests.tune.conftest import hastune


def _evaluated(storage: str, name: str):
    st = optuna.load_study(study_name=name, storage=storage)
    return [t for t in st.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
            if t.user_attrs.get("evaluated")], st


def test_tune_writes_every_output(small_recipe, tmp_path):
    out = tmp_path / "out"
    r = hastune("tune", str(small_recipe), "--trials", "6", "--out", str(out), "--json",
                "--seed", "7")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    for k in ("best_config", "goodput_rps", "goodput_per_gpu", "evaluations", "pruned",
              "sampler", "seed", "in_flight", "workers", "wall_s"):
        assert k in s
    assert s["evaluations"] == 6 and s["seed"] == 7 and s["sampler"] == "tpe"
    assert s["in_flight"] == 2 and s["workers"] >= 1  # auto: this machine's cores
    assert s["goodput_rps"] > 0 and s["pruned"]["total"] >= s["pruned"]["kept"]
    assert json.loads((out / "summary.json").read_text())["goodput_rps"] == s["goodput_rps"]
    cfg = load_config(out / "best_config.yaml")
    assert cfg.gpus <= 5
    rows = (out / "trials.csv").read_text().splitlines()
    assert rows[0].startswith("number,state,goodput_rps") and len(rows) > 6
    for png in ("convergence.png", "goodput_vs_rate.png", "utilisation.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the deployment file is accepted as is, and reproduces the reported goodput
    ev = hastune("evaluate", str(small_recipe), "--config", str(out / "best_config.yaml"),
                 "--json")
    assert ev.returncode == 0, ev.stderr
    assert json.loads(ev.stdout)["goodput_rps"] == s["goodput_rps"]


def test_kill_nine_then_resume_loses_and_repeats_nothing(small_recipe, tmp_path):
    out = tmp_path / "out"
    db = out / "study.db"
    storage = f"sqlite:///{db}"
    args = ["tune", str(small_recipe), "--trials", "14", "--out", str(out), "--no-plots",
            "--study", "s"]
    err = tmp_path / "first.err"
    with err.open("w") as ef:
        proc = subprocess.Popen([sys.executable, "-m", "hastune", *args],
                                stdout=subprocess.DEVNULL, stderr=ef,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 240
    before = []
    while time.time() < deadline:
        time.sleep(0.3)
        assert proc.poll() is None, f"tune exited early ({proc.returncode}):\n{err.read_text()}"
        if db.exists():
            try:
                before, _ = _evaluated(storage, "s")
            except Exception:  # study not created yet
                continue
            if len(before) >= 5:
                break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before, _ = _evaluated(storage, "s")
    assert 5 <= len(before) < 14
    snapshot = {t.number: (t.value, t.user_attrs["key"]) for t in before}
    r = hastune(*args, "--json")
    assert r.returncode == 0, r.stderr
    after, st = _evaluated(storage, "s")
    assert len(after) == 14
    by_number = {t.number: (t.value, t.user_attrs["key"]) for t in after}
    for n, v in snapshot.items():
        assert by_number[n] == v, "a finished trial was lost or changed"
    keys = [t.user_attrs["key"] for t in after]
    assert len(set(keys)) == len(keys), "a finished configuration was evaluated again"
    assert not st.get_trials(states=(optuna.trial.TrialState.RUNNING,))


def test_two_workers_share_a_journal_study(small_recipe, tmp_path):
    journal = tmp_path / "study.log"
    r = hastune("tune", str(small_recipe), "--trials", "10", "--workers", "2", "--storage",
                f"journal:{journal}", "--out", str(tmp_path / "out"), "--no-plots", "--json",
                "--study", "j")
    assert r.returncode == 0, r.stderr
    from optuna.storages.journal import JournalFileBackend

    st = optuna.load_study(study_name="j", storage=optuna.storages.JournalStorage(
        JournalFileBackend(str(journal))))
    evals = [t for t in st.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
             if t.user_attrs.get("evaluated")]
    assert len(evals) == 10  # one command: its pool's results told one by one
    keys = [t.user_attrs["key"] for t in evals]
    assert len(set(keys)) == len(keys)


def test_exit_codes_for_ci(small_recipe, tmp_path):
    data = yaml.safe_load(small_recipe.read_text())
    data["slo"]["tpot_s"] = 0.001  # no decode step is that fast
    impossible = tmp_path / "impossible.yaml"
    impossible.write_text(yaml.safe_dump(data))
    r = hastune("tune", str(impossible), "--trials", "3", "--out", str(tmp_path / "a"),
                "--no-plots", "--json")
    assert r.returncode == 3, r.stderr
    none = json.loads(r.stdout)
    assert none["meets_slo"] is False and none["exit_code"] == 3
    # the rule that removed everything is named: every configuration misses the TPOT SLO
    # at zero load
    assert "zero_load" in none["no_config_reason"], none["no_config_reason"]

    r = hastune("tune", str(small_recipe), "--trials", "3", "--out", str(tmp_path / "b"),
                "--no-plots", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    base = tmp_path / "baseline.json"
    base.write_text(json.dumps({**s, "goodput_rps": 1e6}))
    r = hastune("tune", str(small_recipe), "--trials", "3", "--out", str(tmp_path / "b"),
                "--no-plots", "--json", "--baseline", str(base), "--max-regression", "0.05")
    assert r.returncode == 4, r.stderr
    assert json.loads(r.stdout)["regression"] > 0.05
    base.write_text(json.dumps(s))
    r = hastune("tune", str(small_recipe), "--trials", "3", "--out", str(tmp_path / "b"),
                "--no-plots", "--json", "--baseline", str(base))
    assert r.returncode == 0, r.stderr
    # a baseline of another recipe is refused, naming the field; --force compares anyway
    other = str(tmp_path / "a" / "summary.json")
    r = hastune("tune", str(small_recipe), "--trials", "3", "--out", str(tmp_path / "b"),
                "--no-plots", "--json", "--baseline", other)
    assert r.returncode == 2 and "recipe_sha256" in r.stderr, r.stderr
    assert json.loads(r.stdout)["field"] == "recipe_sha256"
    r = hastune("tune", str(small_recipe), "--trials", "3", "--out", str(tmp_path / "b"),
                "--no-plots", "--json", "--baseline", other, "--force")
    assert r.returncode == 0, r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = hastune("tune", str(small_recipe), "--baseline", str(bad), "--out", str(tmp_path / "c"))
    assert r.returncode == 2 and "bad.json" in r.stderr and "Traceback" not in r.stderr


def test_resume_refuses_another_sampler_or_recipe_unless_forced(small_recipe, tmp_path):
    out = str(tmp_path / "o")
    common = ("--out", out, "--no-plots", "--json", "--no-prune", "--study", "s")
    r = hastune("tune", str(small_recipe), "--trials", "2", *common)
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)
    r = hastune("tune", str(small_recipe), "--trials", "3", "--sampler", "random", *common)
    assert r.returncode == 2 and "sampler 'tpe', now 'random'" in r.stderr, r.stderr
    assert json.loads(r.stdout)["field"] == "--sampler"
    data = yaml.safe_load(small_recipe.read_text())
    data["slo"]["ttft_s"] *= 2  # another recipe under the same study name
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**data, "name": yaml.safe_load(
        small_recipe.read_text()).get("name", "recipe")}))
    r = hastune("tune", str(other), "--trials", "3", *common)
    assert r.returncode == 2 and "recipe" in json.loads(r.stdout)["field"], r.stderr
    # nothing was added to the study by the refused runs
    r = hastune("tune", str(small_recipe), "--trials", "3", "--sampler", "random", "--force",
                *common)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["evaluations"] == 3 and s["sampler"] == "tpe+random"
    assert [h["sampler"] for h in s["searched_with"]] == ["tpe", "random"]
    assert s["recipe_sha256"] == first["recipe_sha256"]
