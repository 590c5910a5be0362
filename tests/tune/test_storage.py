"""The study's storage: processes that open one new SQLite file at once all get it."""

from __future__ import annotations

import multiprocessing as mp
import time

import optuna


def _open(url: str, t0: float) -> str:
    from hastune.tune.storage import open_storage

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
