"""The engine sheds load: `hastune serve` of the reference config at 3× its measured goodput
rejects at arrival what it cannot serve in time (admission control, runners/engine/admission.py),
the requests it does serve meet the TTFT SLO, every request is accounted for, the rejections
are reported, and the exit code says requests were rejected. Also the admission rule itself
on a fake clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runners.engine.admission import AdmissionGate

ROOT = Path(__file__).resolve().parents[2]
# `hastune evaluate examples/reference-cpu.yaml --config examples/configs/reference-cpu-nodg.yaml
# --evaluator real` on this project's 2-core machine: 25.5 req/s (two ref-small replicas, one
# core each; TTFT SLO 0.5 s, TPOT 50 ms at P90)
GOODPUT = 25.5
EXIT_REQUESTS_LOST = 5


def test_admission_rule_on_a_fake_clock():
    g = AdmissionGate(ttft_slo_s=0.5, margin=2.0, prior=3, min_firsts=3)
    for rid in range(3):
        assert g.offer(rid, 0.0) is None  # at most `prior` wait before a prediction
    assert "not measured" in g.offer(3, 0.0)
    g.first(0, 0.1)   # nobody was ahead: L = 0.1 s
    g.first(1, 0.15)  # one ahead: adds 0.05 s
    g.first(2, 0.2)   # two ahead: 0.05 s each
    assert g.base == pytest.approx(0.1) and g.per_ahead == pytest.approx(0.05)
    # L + 2 × q × s ≤ 0.5 s: q ≤ 4 may wait, so five are admitted and the sixth refused
    assert all(g.offer(rid, 0.2) is None for rid in range(10, 15))
    why = g.offer(15, 0.2)
    assert why is not None and "predicted TTFT 0.35 s, its tail 0.60 s" in why
    for rid in range(10, 15):
        g.gone(rid)  # failed before their first token: nobody waits
    assert g.q == 0 and g.offer(16, 0.3) is None and g.offer(17, 0.3) is None
    # the oldest has waited 0.45 s > SLO − L: the engine is behind, whatever L and s say
    assert "the engine is behind" in g.offer(18, 0.75)
    g.begin()  # a new run: the measurements stay, the queue is empty
    assert g.q == 0 and g.base == pytest.approx(0.1)
    assert g.extra()["admission_max_waiting"] == 0.0


def test_serve_at_three_times_goodput_sheds_load():
    pytest.importorskip("torch")
    rate = 3 * GOODPUT
    cmd = [sys.executable, "-m", "hastune", "serve", "examples/configs/reference-cpu-nodg.yaml",
           "--recipe", "examples/reference-cpu.yaml", "--rate", str(rate), "-n", "600",
           "--json"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == EXIT_REQUESTS_LOST, p.stderr[-2000:]
    out = json.loads(p.stdout)  # JSON alone on stdout
    assert "Traceback" not in p.stderr
    assert out["sent"] == 600 == out["completed"] + out["rejected_at_arrival"] + out["failed"]
    assert out["failed"] == 0, out["failures"]
    assert out["rejected_at_arrival"] > 0 and out["exit_code"] == EXIT_REQUESTS_LOST
    assert "rejected at arrival" in p.stderr
    assert out["ttft_p90_completed_s"] <= 2 * 0.5, out  # 2× the recipe's TTFT SLO
    # it served about what it can (about a third), not a trickle
    assert out["completed"] >= 0.15 * 600, out
