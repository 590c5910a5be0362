"""Many tuners, one study: 4 `hastune tune` processes on one SQLite and one journal study, and
`--workers 4`, each exit 0 with exactly `--trials` evaluations, none repeated, nothing left
WAITING or RUNNING; pruning runs once; the trials are the same for any --workers; an
evaluation process that dies is named, makes the command exit 1, and the next run repairs the
study. In-process tests (a lookup evaluator, forked processes) count every evaluation the
evaluator was asked for."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import optuna
import pytest

from hastune.recipe import load_recipe
from hastune.tune.claims import BEAT, CLAIM, Reaper, census, claim, new_trial
from hastune.tune.runner import TuneOptions, Tuner, evaluated_trials
from hastune.tune.storage import TuneError, open_storage
from tests.fakes import LookupEvaluator
from tests.tune.conftest import hastune

TRIALS = 12
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _load(url: str, name: str = "s") -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=name, storage=open_storage(url, None))


def _check_study(url: str, trials: int = TRIALS, name: str = "s") -> list:
    st = _load(url, name)
    all_trials = st.get_trials()
    evals = evaluated_trials(st)
    keys = Counter(t.user_attrs["key"] for t in evals)
    states = Counter(t.state.name for t in all_trials)
    assert len(evals) == trials, (len(evals), states)
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]
    assert states["WAITING"] == 0 and states["RUNNING"] == 0, states
    preparers = [t for t in all_trials if t.user_attrs.get("reason") == "pruned the study"]
    assert len(preparers) == 1, "pruning ran more than once"
    assert sum(t.user_attrs.get("source") == "prune-probe" for t in evals) <= 3
    return all_trials


def _tune(recipe, url: str, out, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "hastune", "tune", str(recipe), "--trials", str(TRIALS),
         "--storage", url, "--study", "s", "--out", str(out), "--no-plots", "--json", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_four_tune_processes_share_one_study(kind, small_recipe, tmp_path):
    url = (f"sqlite:///{tmp_path / 'study.db'}" if kind == "sqlite"
           else f"journal:{tmp_path / 'study.log'}")
    procs = [_tune(small_recipe, url, tmp_path / f"out{i}") for i in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        assert "Traceback" not in err, err
        s = json.loads(out)
        assert s["evaluations"] == TRIALS, s
    trials = _check_study(url)
    assert len({t.user_attrs["worker"] for t in trials if t.user_attrs.get("evaluated")}) >= 2


def test_workers_share_the_default_study(small_recipe, tmp_path):
    out = tmp_path / "out"
    r = hastune("tune", str(small_recipe), "--trials", str(TRIALS), "--workers", "4",
                "--study", "s", "--out", str(out), "--no-plots", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["evaluations"] == TRIALS
    trials = _check_study(f"sqlite:///{out / 'study.db'}")
    by = {t.user_attrs["evaluated_by"] for t in trials if t.user_attrs.get("source") == "sampler"}
    assert len(by) >= 2, by  # evaluated in the pool's processes, not one


def _sequence(out) -> list[tuple]:
    """The study's trials in order: what was proposed, and what each gave."""
    st = _load(f"sqlite:///{out / 'study.db'}")
    return [(t.number, t.state.name, t.params, t.value, t.user_attrs.get("key"),
             t.user_attrs.get("reason")) for t in st.get_trials()]


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_the_result_does_not_depend_on_the_number_of_workers(small_recipe, tmp_path, sampler):
    """One seed, --workers 1 and 3: the same trials in the same order — proposals, values,
    duplicates and repairs — and the same answer: results are told in the order they were
    proposed, each proposal made with the same ones still under way (--in-flight)."""
    runs = {}
    for w in ("1", "3"):
        out = tmp_path / f"w{w}"
        r = hastune("tune", str(small_recipe), "--trials", str(TRIALS), "--workers", w,
                    "--sampler", sampler, "--study", "s", "--out", str(out), "--no-plots",
                    "--json")
        assert r.returncode == 0, r.stderr
        runs[w] = (json.loads(r.stdout), _sequence(out))
    (one, seq1), (three, seq3) = runs["1"], runs["3"]
    assert seq1 == seq3
    for k in ("best_config", "goodput_rps", "evaluations", "duplicates", "convergence"):
        assert one[k] == three[k], k


def _pool_children(pid: int) -> list[int]:
    """The spawned evaluation processes of `pid` (not multiprocessing's resource tracker)."""
    try:
        kids = open(f"/proc/{pid}/task/{pid}/children").read().split()
    except OSError:
        return []
    out = []
    for k in kids:
        try:
            cmd = open(f"/proc/{k}/cmdline").read()
        except OSError:
            continue
        if "spawn_main" in cmd:
            out.append(int(k))
    return out


def test_a_worker_killed_fails_the_command_and_the_next_run_repairs(small_recipe, tmp_path):
    out = tmp_path / "out"
    url = f"sqlite:///{out / 'study.db'}"
    args = ("--workers", "2")
    p = _tune(small_recipe, url, out, *args)
    killed = None
    deadline = time.time() + 120
    while killed is None and time.time() < deadline and p.poll() is None:
        time.sleep(0.1)
        try:
            st = _load(url)
        except Exception:  # noqa: BLE001 - not created yet
            continue
        running = [t for t in st.get_trials(states=(optuna.trial.TrialState.RUNNING,))
                   if t.user_attrs.get(CLAIM) and len(evaluated_trials(st)) >= 4]
        kids = _pool_children(p.pid)
        if running and kids:  # a trial under way: kill every pool process, so the one
            for k in kids:    # evaluating it dies too (an idle one alone can go unnoticed
                os.kill(k, signal.SIGKILL)  # if the last result is already on its way)
            killed = kids
    _, err = p.communicate(timeout=240)
    assert killed is not None, "the run ended before a worker could be killed"
    assert p.returncode == 1, err
    assert any(f"(pid {k}) was killed by SIGKILL" in err for k in killed), err
    assert "Traceback" not in err, err
    st = _load(url)
    assert not st.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    again = _tune(small_recipe, url, out, *args)
    _, err = again.communicate(timeout=240)
    assert again.returncode == 0, err
    _check_study(url)


# -- in process: every evaluation counted ------------------------------------------------------
class Slow(LookupEvaluator):
    """A lookup evaluator that takes a while (so workers overlap) and can die mid-trial."""

    def __init__(self, recipe, die_at: int | None = None):
        super().__init__(recipe)
        self.die_at = die_at

    def goodput(self, config, *args, **kw):
        if self.die_at is not None and len(self.calls) == self.die_at:
            os._exit(9)  # kill -9 while evaluating: the trial stays RUNNING with its claim
        time.sleep(0.03)
        return super().goodput(config, *args, **kw)


def _worker(recipe, url: str, trials: int, seed: int, die_at: int | None, q) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rec = load_recipe(recipe)
    ev = Slow(rec, die_at)
    tuner = Tuner(rec, TuneOptions(trials=trials, storage=url, study="s", seed=seed),
                  evaluator=ev)
    tuner.work(tuner.open_study(seed))
    q.put(ev.calls)


def _run_forked(recipe, url: str, trials: int, die_at=(None,) * 4,
                lead_s: float = 0.0) -> list[list[str]]:
    """Four workers; the first starts `lead_s` before the others."""
    ctx = mp.get_context("fork")
    q = ctx.SimpleQueue()
    procs = [ctx.Process(target=_worker, args=(recipe, url, trials, i, d, q))
             for i, d in enumerate(die_at)]
    for i, p in enumerate(procs):
        p.start()
        if i == 0:
            time.sleep(lead_s)
    deadline = time.time() + 120
    while any(p.is_alive() for p in procs) and time.time() < deadline:
        time.sleep(0.05)  # is_alive reaps a dead child, as `tune --workers` does
    calls = []
    while not q.empty():
        calls.append(q.get())
    return calls


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_no_configuration_is_evaluated_twice_in_process(kind, small_recipe, tmp_path):
    url = (f"sqlite:///{tmp_path / 'study.db'}" if kind == "sqlite"
           else f"journal:{tmp_path / 'study.log'}")
    calls = _run_forked(small_recipe, url, TRIALS)
    assert len(calls) == 4
    every = [k for c in calls for k in c]
    assert len(every) == TRIALS, [len(c) for c in calls]  # what the evaluator was asked
    assert len(set(every)) == TRIALS
    _check_study(url)


def test_a_dead_pruner_is_replaced_and_the_study_still_ends_exact(small_recipe, tmp_path):
    """The first worker starts alone, prunes, and dies evaluating its second probe: another
    takes over the pruning (the probe evaluated is read back), the probe claimed by the dead
    one is evaluated again, and the study still ends at exactly TRIALS."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    calls = _run_forked(small_recipe, url, TRIALS, die_at=(1, None, None, None), lead_s=1.0)
    assert len(calls) == 3  # one died
    st = _load(url)
    dead = [t for t in st.get_trials(states=(optuna.trial.TrialState.FAIL,))
            if "is gone" in t.user_attrs.get("reason", "")]
    assert sorted(bool(t.user_attrs.get(CLAIM)) for t in dead) == [False, True]  # prepare, probe
    every = [k for c in calls for k in c]
    # + the probe the dead one finished
    assert len(every) == TRIALS - 1 and len(set(every)) == TRIALS - 1
    _check_study(url)


# -- the pieces -------------------------------------------------------------------------------
def _study(tmp_path) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(study_name="s", storage=open_storage(
        f"journal:{tmp_path / 'j.log'}", None), direction="maximize")


def test_claims_let_one_of_two_through_and_respect_the_quota(tmp_path):
    st = _study(tmp_path)
    a, b = new_trial(st), new_trial(st)
    assert claim(st, a, "k1", quota=2) == ("won", 0.0)
    assert claim(st, b, "k1", quota=2) == ("busy", 0.0)
    b.set_user_attr(CLAIM, None)
    assert claim(st, b, "k2", quota=2) == ("won", 0.0)
    c = new_trial(st)
    assert claim(st, c, "k3", quota=2) == ("full", 0.0)  # two under way
    assert census(st).claimed == {"k1": a.number, "k2": b.number, "k3": c.number}


def test_a_silent_worker_on_another_host_is_failed_after_its_heartbeat_stops(tmp_path):
    st = _study(tmp_path)
    ids = []
    for worker in ("elsewhere:1", "elsewhere:2"):
        t = new_trial(st)
        st._storage.set_trial_user_attr(t._trial_id, "worker", worker)
        ids.append(t._trial_id)
    reaper = Reaper(stale_s=0.3)
    assert reaper.reap(st) == 0  # first look: the heartbeats are noted
    time.sleep(0.4)
    st._storage.set_trial_system_attr(ids[1], BEAT, 1)  # the second one is alive
    assert reaper.reap(st) == 1
    states = {t._trial_id: t.state for t in st.get_trials()}
    assert states[ids[0]] == optuna.trial.TrialState.FAIL
    assert states[ids[1]] == optuna.trial.TrialState.RUNNING


def test_waiting_for_another_process_s_pruning_times_out_clearly(small_recipe, tmp_path):
    url = f"journal:{tmp_path / 'j.log'}"
    rec = load_recipe(small_recipe)
    tuner = Tuner(rec, TuneOptions(trials=3, storage=url, study="s", prepare_timeout_s=0.5),
                  evaluator=LookupEvaluator(rec))
    st = tuner.open_study()
    other = new_trial(st, role="prepare")  # a live process (this one) pruning, never done
    mine = Tuner(rec, TuneOptions(trials=3, storage=url, study="s", prepare_timeout_s=0.5),
                 evaluator=LookupEvaluator(rec))
    with pytest.raises(TuneError, match=f"trial #{other.number} to finish pruning"):
        mine.prepare(mine.open_study())
    assert "survivors" not in st.user_attrs
