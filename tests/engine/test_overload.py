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
    g = AdmissionGate(ttft_slo_s=0.5, factor=1.0, prior=2, min_firsts=3)
    assert g.offer(0.0) is None and g.offer(0.0) is None
    assert "not measured" in g.offer(0.0)  # no service rate yet: at most `prior` wait
    for t in (0.1, 0.2):  # two first tokens; busy 0.2 s
        g.first(t)
    assert g.q == 0 and g.rate() is None  # still fewer than min_firsts
    assert g.offer(0.2) is None
    g.first(0.3)  # three first tokens over 0.3 busy seconds: ~10/s
    assert g.rate() == pytest.approx(10.0, rel=0.05)
    # predicted TTFT (q + 1) / 10 ≤ 0.5 s: five admitted at once, the sixth refused
    assert all(g.offer(0.3) is None for _ in range(5))
    why = g.offer(0.3)
    assert why is not None and "predicted TTFT" in why and g.q == 5
    g.gone(0.3)  # a waiting request failed: the queue shrinks, idle time is not busy time
    busy = g.busy
    g.begin()
    g.offer(10.0)
    assert g.busy == pytest.approx(busy * 2.718281828 ** (-(10.0 - 0.3) / g.tau), rel=1e-6)
    assert g.extra()["admission_max_waiting"] == 1.0 and g.rejected == 0


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
