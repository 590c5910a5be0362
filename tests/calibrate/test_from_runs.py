"""`hastune calibrate RUN... --profile P --out P2.yaml`: the profile's forms re-fitted from the
engine's recorded steps (hastune/calibrate/from_runs.py), on generated step records whose
true coefficients are known."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hastune.calibrate.from_runs import NAMES, load_runs, recalibrate
from hastune.errors import InputError
from hastune.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "cpu" / "ref-small-1core.yaml"


def _steps(prof, scale: dict[str, float], n: int, seed: int, noise: float = 0.0,
           shares: bool = False) -> dict[str, dict]:
    """Step columns of two workers timed by `prof`'s forms × scale[stage] (× noise)."""
    rng = np.random.default_rng(seed)
    cols: dict[str, dict] = {}
    for name, kinds in (("E0", ("encode", "prefill")), ("D0", ("decode",))):
        c: dict[str, list] = {k: [] for k in ("kind", "t", "dur", "batch", "tokens",
                                               "context", "share", "overlap", "tokens_sq")}
        for i in range(n):
            kind = kinds[i % len(kinds)]
            b = int(rng.integers(1, 9))
            x = rng.integers(16, 400, b)
            tok, sq, ctx = int(x.sum()), int((x * x).sum()), 0
            if kind == "encode":
                t = prof.encode.latency(b, tok, sq)
            elif kind == "prefill":
                t = prof.prefill.latency(tok, sq)
            else:
                ctx = int(rng.integers(b, 200 * b))
                tok, sq = b, 0
                t = prof.decode.step(b, ctx)
            t *= scale[kind] * (1 + noise * rng.standard_normal())
            ov = int(shares and i % 5 == 0)
            if ov:
                t *= 7.0  # ran beside the other side of its worker: never fitted
            for k, v in zip(c, (kind, float(i), max(t, 1e-6), b, tok, ctx, 1.0, ov, sq)):
                c[k].append(v)
        cols[name] = c
    return cols


@settings(max_examples=15, deadline=None)
@given(k_enc=st.floats(0.4, 3.0), k_pf=st.floats(0.4, 3.0), k_dec=st.floats(0.4, 3.0),
       seed=st.integers(0, 10_000))
def test_recovers_a_uniformly_slower_device(k_enc, k_pf, k_dec, seed):
    prof = load_profile(PROFILE)
    scale = {"encode": k_enc, "prefill": k_pf, "decode": k_dec}
    probes = [_steps(prof, scale, 120, seed, noise=0.02, shares=True)]
    new, fits = recalibrate(prof, probes, seed=seed)
    assert {f.stage for f in fits} == set(NAMES)
    for f in fits:
        k = scale[f.stage]
        # relative to the measured step: the old form is off by |1/k − 1|
        assert f.before["median_pct"] == pytest.approx(abs(1 / k - 1) * 100, abs=4.0)
        assert f.after["median_pct"] <= 5.0, f
        assert f.after["median_pct"] <= max(f.before["median_pct"], 3.0)
        assert abs(f.after["total_pct"]) <= 2.0  # adds up to the steps' seconds
        # the written profile predicts the true (scaled) step times
        probe = {"encode": new.encode.latency(4, 800, 200_000) /
                 prof.encode.latency(4, 800, 200_000),
                 "prefill": new.prefill.latency(900, 250_000) /
                 prof.prefill.latency(900, 250_000),
                 "decode": new.decode.step(8, 900) / prof.decode.step(8, 900)}[f.stage]
        assert probe == pytest.approx(k, rel=0.1)
    # the share curves and the rest are the profile's
    assert new.prefill.sm_curve == prof.prefill.sm_curve and new.memory == prof.memory
    assert "RECALIBRATED" in new.source


@settings(max_examples=8, deadline=None)
@given(slow=st.floats(2.0, 6.0), share=st.floats(0.1, 0.3), seed=st.integers(0, 1000))
@example(slow=2.0, share=0.1015625, seed=102)  # a draw whose stalls cost one stage only 5%
def test_a_busy_machine_s_slow_steps_count_in_the_total(slow, share, seed):
    """Some steps stalled (another process took the core): the median step is the
    profile's, but the simulator sums step times, so the written form adds up to the
    recorded seconds."""
    prof = load_profile(PROFILE)
    cols = _steps(prof, {"encode": 1.0, "prefill": 1.0, "decode": 1.0}, 200, seed)
    rng = np.random.default_rng(seed)
    clean: dict[str, float] = {}
    stalled: dict[str, float] = {}
    for c in cols.values():
        c["dur"] = [d * (slow if rng.random() < share else 1.0) for d in c["dur"]]
    for c in cols.values():
        for kind, d in zip(c["kind"], c["dur"]):
            stalled[kind] = stalled.get(kind, 0.0) + d
    for c in _steps(prof, {"encode": 1.0, "prefill": 1.0, "decode": 1.0}, 200, seed).values():
        for kind, d in zip(c["kind"], c["dur"]):
            clean[kind] = clean.get(kind, 0.0) + d
    _, fits = recalibrate(prof, [cols], seed=seed)
    for f in fits:
        # the old form leaves the stalls out: it sums to the unstalled seconds, short by
        # what the stalls this draw happened to put on this stage added
        missed = (clean[f.stage] / stalled[f.stage] - 1.0) * 100.0
        assert missed <= 0.0
        assert f.before["total_pct"] == pytest.approx(missed, abs=0.02)
        assert abs(f.after["total_pct"]) <= 0.5, f


def test_few_steps_keep_the_form():
    prof = load_profile(PROFILE)
    cols = _steps(prof, {"encode": 2.0, "prefill": 2.0, "decode": 2.0}, 6, 0)
    new, fits = recalibrate(prof, [cols])
    assert all(f.method.startswith("kept") for f in fits)
    assert new.decode == prof.decode and new.encode == prof.encode


def _write(tmp_path: Path, obj) -> Path:
    p = tmp_path / "run.json"
    p.write_text(json.dumps(obj))
    return p


def test_cli_writes_a_profile_that_loads_and_prints_errors(tmp_path):
    prof = load_profile(PROFILE)
    cols = _steps(prof, {"encode": 1.5, "prefill": 1.3, "decode": 1.4}, 90, 1, noise=0.02)
    run = _write(tmp_path, {"goodput_rps": 1.0, "engine_steps": [{"rate": 5.0,
                                                                   "workers": cols}]})
    out = tmp_path / "p2.yaml"
    cmd = [sys.executable, "-m", "hastune", "calibrate", str(run), "--profile", str(PROFILE),
           "--out", str(out), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    dec = next(s for s in got["stages"] if s["stage"] == "decode")
    assert dec["before"]["median_pct"] > 25 and dec["after"]["median_pct"] < 5  # 1 − 1/1.4
    new = load_profile(out)
    assert new.decode.step(8, 900) == pytest.approx(1.4 * prof.decode.step(8, 900), rel=0.1)
    assert out.read_text().startswith("# Re-fitted from")
    p = subprocess.run(cmd[:-1], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 0 and "before" in p.stdout and "decode" in p.stdout


def test_bad_runs_are_refused(tmp_path):
    with pytest.raises(InputError, match="no engine step timings"):
        load_runs([_write(tmp_path, {"goodput_rps": 3.0, "probes": []})])
    bad = tmp_path / "x.json"
    bad.write_text("{nope")
    with pytest.raises(InputError, match="not a JSON run record"):
        load_runs([bad])
    with pytest.raises(InputError, match="different lengths"):
        load_runs([_write(tmp_path, {"engine_steps": [{"workers": {"D0": {
            "kind": ["decode"], "t": [0.0, 1.0], "dur": [0.1]}}}]})])
    with pytest.raises(InputError, match="no such run record"):
        load_runs([tmp_path / "missing.json"])
    p = subprocess.run([sys.executable, "-m", "hastune", "calibrate", str(tmp_path / "m.json"),
                        "--profile", str(PROFILE), "--out", str(PROFILE)],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 2 and "overwrite" in p.stderr
