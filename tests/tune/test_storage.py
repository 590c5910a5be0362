"""The study's storage: processes that open one new SQLite file at once all get it; storage
URLs and output paths that cannot work are refused before any work (exit 2, the option and
the fix); a storage that turns read-only mid-run ends the run in one line (exit 1) with
nothing finished lost."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from hastune.errors import InputError
from hastune.tune.storage import check_out, check_storage, open_storage
from tests.tune.conftest import hastune


def _open(url: str, t0: float) -> str:
    while time.time() < t0:  # start together: the race is in creating the tables
        pass
    try:
        st = open_storage(url, None)
        optuna.create_study(storage=st, study_name="s", load_if_exists=True)
        return "ok"
    except Exception as e:  # noqa: BLE001 - the test reports what went wrong
        return f"{type(e).__name__}: {e}"


def test_simultaneous_first_opens_of_a_sqlite_study_all_succeed(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ctx = mp.get_context("fork")
    for i in range(6):
        url = f"sqlite:///{tmp_path / f'{i}.db'}"
        with ctx.Pool(4) as pool:
            got = pool.starmap(_open, [(url, time.time() + 0.3)] * 4)
        assert got == ["ok"] * 4, got
        assert len(optuna.get_all_study_names(url)) == 1


# -- storage URLs and output paths, checked before any work -----------------------------------
@pytest.mark.parametrize("url, problem", [
    ("bogus://x", "unknown storage scheme 'bogus'"),
    ("not a url", "is not a storage URL"),
    ("sqlite:////nonexistent/dir/x.db", "directory /nonexistent/dir does not exist"),
    ("journal:/nonexistent/dir/j", "directory /nonexistent/dir does not exist"),
    ("/nonexistent/dir/j.log", "directory /nonexistent/dir does not exist"),
    ("journal:", "needs a file path"),
    ("sqlite:///{tmp}/garbage.db", "is not a SQLite database"),
    ("journal:{tmp}/garbage.log", "is not an optuna journal file"),
    ("sqlite:///{tmp}", "is a directory"),
    ("journal:{tmp}/afile/j.log", "is a file, not a directory"),
])
def test_a_storage_that_cannot_work_is_refused_naming_the_option(url, problem, tmp_path):
    (tmp_path / "garbage.db").write_bytes(b"not a database at all\n" * 10)
    (tmp_path / "garbage.log").write_text("hello\n")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError) as e:
        check_storage(url.format(tmp=tmp_path), tmp_path / "out")
    assert e.value.field == "--storage" and problem in e.value.problem, e.value.message
    assert e.value.fix
    assert not Path("/nonexistent").exists()


def test_a_driver_that_is_not_installed_is_named():
    pytest.importorskip("sqlalchemy")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        with pytest.raises(InputError, match="driver is not installed"):
            check_storage("postgresql://u@localhost/db")
    else:
        pytest.skip("psycopg is installed")


def test_storages_that_work_pass_and_a_file_in_out_may_wait_for_out(tmp_path):
    out = tmp_path / "out"
    for url in (None, "memory", f"sqlite:///{tmp_path / 'new.db'}", f"journal:{tmp_path / 'j'}",
                f"sqlite:///{out / 'study.db'}", f"journal:{out / 'study.log'}"):
        check_storage(url, out)
    st = open_storage(f"journal:{out / 'study.log'}", out)  # creates --out, nothing above it
    optuna.create_study(storage=st, study_name="s")
    assert (out / "study.log").exists()
    assert open_storage(f"journal:{out / 'study.log'}", out)  # an existing journal is fine


@pytest.mark.parametrize("where, problem", [
    ("afile", "exists and is not a directory"),
    ("afile/sub", "is a file, not a directory"),
    ("missing/dir/out", "does not exist"),
])
def test_out_that_cannot_be_a_directory_is_refused(where, problem, tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError) as e:
        check_out(tmp_path / where)
    assert e.value.field == "--out" and problem in e.value.problem
    assert not (tmp_path / "missing").exists()
    check_out(tmp_path / "new")  # its parent exists: hastune creates it


def test_the_cli_refuses_bad_storage_and_out_before_any_work(small_recipe, tmp_path):
    (tmp_path / "afile").write_text("x")
    cases = [
        (["--storage", "bogus://x"], "--storage"),
        (["--storage", f"journal:{tmp_path / 'missing' / 'dir' / 'j'}"], "--storage"),
        (["--out", str(tmp_path / "afile")], "--out"),
    ]
    for args, option in cases:
        r = hastune("tune", str(small_recipe), "--trials", "2", "--no-plots", *args,
                    *(["--out", str(tmp_path / "o")] if "--out" not in args else []))
        assert r.returncode == 2, (args, r.stderr)
        assert option in r.stderr and "Fix:" in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "missing").exists()
    r = hastune("grid", str(small_recipe), "--out", str(tmp_path / "afile"))
    assert r.returncode == 2 and "--out" in r.stderr


def _make_read_only(paths) -> bool:
    """Writes refused from now on, even for root (chattr +i); False if this system cannot."""
    if os.geteuid() != 0:
        for p in paths:
            p.chmod(0o555 if p.is_dir() else 0o444)
        return True
    r = subprocess.run(["chattr", "+i", *map(str, paths)], capture_output=True)
    return r.returncode == 0


def _writable_again(paths) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", *map(str, paths)], capture_output=True)
    else:
        for p in paths:
            p.chmod(0o755 if p.is_dir() else 0o644)


def test_a_storage_that_turns_read_only_mid_run_ends_in_one_line(small_recipe, tmp_path):
    if os.geteuid() == 0 and shutil.which("chattr") is None:
        pytest.skip("root without chattr: nothing here can make a file read-only")
    dbdir = tmp_path / "db"
    dbdir.mkdir()
    db = dbdir / "study.db"
    url = f"sqlite:///{db}"
    with (tmp_path / "err").open("w") as ef:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hastune", "tune", str(small_recipe), "--trials", "20",
             "--storage", url, "--study", "s", "--out", str(tmp_path / "out"), "--no-plots",
             "--json"], stdout=subprocess.PIPE, stderr=ef, text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"})
    locked = [db, dbdir]
    try:
        deadline = time.time() + 120
        n = 0
        while time.time() < deadline and proc.poll() is None and n < 4:
            time.sleep(0.2)
            try:
                st = optuna.load_study(study_name="s", storage=url)
                n = sum(bool(t.user_attrs.get("evaluated")) for t in st.get_trials())
            except Exception:  # noqa: BLE001 - not created yet
                continue
        assert proc.poll() is None, "the run ended before its storage was made read-only"
        if not _make_read_only(locked):
            proc.kill()
            pytest.skip("chattr +i is not permitted here")
        out, _ = proc.communicate(timeout=120)
    finally:
        _writable_again(locked)
    err = (tmp_path / "err").read_text()
    assert proc.returncode == 1, err
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert "storage" in lines[0] and "resume" in lines[0], err
    obj = json.loads(out)  # --json: one object on stdout either way, exit code 1
    assert obj["exit_code"] == 1, out
    if "goodput_rps" in obj:  # the summary of what was finished (the storage still reads)
        assert len(lines) == 1 and obj["failures"], err
    else:  # the error object, naming both causes; one line each on stderr
        assert len(lines) == 2 and "cannot read the study back" in lines[1], err
        # the write that failed is a trial's (StorageFailure: "refused a write", naming the
        # trial and its result) or optuna's own ("storage failed"): either names the storage
        assert "the study's storage" in obj["message"] and "resume" in obj["message"], obj
        assert obj["error"] in lines[1], (obj, err)
    st = optuna.load_study(study_name="s", storage=url)
    kept = [t for t in st.get_trials() if t.user_attrs.get("evaluated")]
    assert len(kept) >= n  # nothing finished is lost
    r = hastune("tune", str(small_recipe), "--trials", str(len(kept) + 1), "--storage", url,
                "--study", "s", "--out", str(tmp_path / "out"), "--no-plots", "--json")
    assert r.returncode == 0, r.stderr  # resumes: the trial cut off is failed
    st = optuna.load_study(study_name="s", storage=url)
    assert not st.get_trials(states=(optuna.trial.TrialState.RUNNING,))
