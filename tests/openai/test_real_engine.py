"""`hastune evaluate --evaluator real --engine vllm` against the stand-in server
(hastune.standin, started through --launch-cmd): the goodput its latencies imply, and no
process left behind after a run, Ctrl-C, SIGTERM or kill -9 of hastune.

Every process the deployment starts carries HASTUNE_TEST_MARK (its environment is inherited
from the CLI's), so /proc shows whatever survived."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from hastune.goodput import RateGrid

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "configs" / "reference-cpu-nodg.yaml"
TOL = 0.25          # the recipes' rate grid: 1.25^k req/s
START = 20.0


def recipe(tmp: Path, ttft_slo: float, tpot_slo: float, out_tokens: int,
           max_probes: int = 40, start: float = START) -> Path:
    data = {"kind": "recipe", "name": "standin", "model": "ref-small",
            "profile": str(ROOT / "profiles" / "cpu" / "ref-small-1core.yaml"),
            "cluster": {"gpu": "cpu", "gpus": 2, "gpus_per_node": 2},
            "workload": {"requests": 60, "warmup": 0.1,
                         "arrival": {"process": "gamma", "cv": 0.001},  # evenly spaced
                         "mix": {"text": 1.0},
                         "prompt_tokens": {"dist": "fixed", "mean": 16},
                         "output_tokens": {"dist": "fixed", "mean": out_tokens}},
            "slo": {"ttft_s": ttft_slo, "tpot_s": tpot_slo, "percentile": 90},
            "evaluator": {"start_rate": start, "tolerance": TOL, "max_probes": max_probes},
            "seed": 0}
    p = tmp / "recipe.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def standin(tmp: Path, **lat: float) -> str:
    args = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in lat.items())
    return (f"{sys.executable} -m hastune.standin --port {{port}} {args} "
            f"--pid-file {tmp / 'standin.pid'}")


def env(mark: str, tmp: Path | None = None) -> dict[str, str]:
    """The CLI's environment: the mark, and the deployments' scratch folders under `tmp`."""
    e = {**os.environ, "HASTUNE_TEST_MARK": mark, "OMP_NUM_THREADS": "1",
         "PYTHONPATH": str(ROOT)}
    if tmp is not None:
        e["TMPDIR"] = str(tmp)
    return e


def evaluate(rec: Path, cmd: str, mark: str, *extra: str,
             timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hastune", "evaluate", str(rec), "-c",
                           str(CONFIG), "--evaluator", "real", "--engine", "vllm",
                           "--launch-cmd", cmd, "-n", "60", "--json", *extra],
                          capture_output=True, text=True, timeout=timeout,
                          env=env(mark, rec.parent), cwd=ROOT)


def marked(mark: str) -> list[int]:
    """Live processes whose environment carries `mark`."""
    out = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if f"HASTUNE_TEST_MARK={mark}".encode() not in (d / "environ").read_bytes():
                continue
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            out.append(int(d.name))
    return out


def gone(mark: str, within: float = 15.0) -> list[int]:
    deadline = time.monotonic() + within
    while (left := marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def steady_tpot(rate: float, ttft: float, tpot: float, slowdown: float, n: int) -> float:
    """The stand-in's steady TPOT under evenly spaced arrivals (hastune.standin)."""
    m = n - 1
    return tpot * (1 + slowdown * (rate * ttft - 1)) / (1 - tpot * slowdown * rate * m)


def test_fixed_latencies_pass_at_every_rate_up_to_the_cap(tmp_path: Path) -> None:
    """TTFT 0.05 s, TPOT 0.01 s whatever the load, SLOs 0.1 / 0.02: every probe passes, so
    the search doubles from the start rate until its probes run out (max_probes 3). The rates
    stay at 10-40 req/s: at 160 a loaded 2-core CI machine's client and stand-in (both Python)
    added their own delay and a probe failed (stop 21's CI)."""
    mark = uuid.uuid4().hex
    rec = recipe(tmp_path, 0.1, 0.02, 4, max_probes=3, start=10.0)
    p = evaluate(rec, standin(tmp_path, ttft=0.05, tpot=0.01), mark)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    grid = RateGrid(TOL)
    k0 = grid.index(10.0)
    want = [grid.rate(k0 + i * grid.steps(2.0)) for i in range(3)]
    assert [pr["rate"] for pr in out["probes"]] == pytest.approx(want)
    assert all(pr["passed"] for pr in out["probes"])
    assert out["goodput_rps"] == pytest.approx(want[-1])
    for pr in out["probes"]:  # the client measures what the stand-in serves
        assert 0.05 <= pr["ttft_p90_s"] < 0.1
        assert 0.01 <= pr["tpot_p90_s"] < 0.02
    assert out["engine"] == "vllm" and out["model"] == "standin"
    assert out["client"]["errors"] == {}
    assert (tmp_path / "standin.pid").exists()
    assert gone(mark) == []


def test_goodput_where_the_slowdown_arithmetic_puts_it(tmp_path: Path) -> None:
    """TPOT grows with the requests in flight; the steady TPOT (steady_tpot) crosses the SLO
    between two grid rates, and the goodput is the lower one."""
    lat = {"ttft": 0.01, "tpot": 0.01, "slowdown": 0.2697}
    n = 8
    grid = RateGrid(TOL)
    # the SLO: the steady TPOT at the geometric middle of the grid rates k0+2 and k0+3
    k_want = grid.index(START) + 2
    mid = (grid.rate(k_want) * grid.rate(k_want + 1)) ** 0.5
    slo = steady_tpot(mid, n=n, **lat)
    lo, hi = steady_tpot(grid.rate(k_want), n=n, **lat), steady_tpot(grid.rate(k_want + 1),
                                                                      n=n, **lat)
    assert lo < 0.9 * slo and hi > 1.15 * slo  # margins the client's jitter stays within
    mark = uuid.uuid4().hex
    p = evaluate(recipe(tmp_path, 0.1, slo, n), standin(tmp_path, **lat), mark)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["goodput_rps"] == pytest.approx(grid.rate(k_want))
    for pr in out["probes"]:
        want = steady_tpot(pr["rate"], n=n, **lat)
        if 0 < want < 0.05:  # below the rate where in-flight requests grow without bound
            assert pr["tpot_p90_s"] == pytest.approx(want, rel=0.25)
        assert pr["passed"] == (pr["rate"] <= grid.rate(k_want) * 1.001)
    assert gone(mark) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_no_process_left_after_a_signal_mid_run(tmp_path: Path, sig: int) -> None:
    """Ctrl-C, SIGTERM or kill -9 of hastune while it drives load: the stand-in, and a
    background process its launch command started, end too (kill -9: the watchdog sees its
    parent go)."""
    mark = uuid.uuid4().hex
    rec = recipe(tmp_path, 1.0, 1.0, 400)   # long requests: the run is mid-probe
    cmd = f"sleep 600 & {standin(tmp_path, ttft=0.01, tpot=0.01)}"
    proc = subprocess.Popen([sys.executable, "-m", "hastune", "evaluate", str(rec), "-c",
                             str(CONFIG), "--evaluator", "real", "--engine", "vllm",
                             "--launch-cmd", cmd, "-n", "60"], env=env(mark, tmp_path), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "standin.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # health, warm-up, into the first probe
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        assert len(marked(mark)) >= 4  # hastune, watchdog, bash, sleep, standin
        proc.send_signal(sig)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:  # say where it is stuck (hastune's SIGUSR1 stacks)
            proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            proc.kill()
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"hastune did not exit 30 s after signal {sig}:\n{out[-6000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    if sig == signal.SIGINT:
        assert proc.returncode == 130
    assert gone(mark) == []


def test_usr1_prints_the_stacks_and_the_run_goes_on(tmp_path: Path) -> None:
    """kill -USR1 of a running hastune prints every thread's stack (where a run that seems
    stuck is) and does not stop it: a Ctrl-C afterwards still ends it with 130."""
    mark = uuid.uuid4().hex
    rec = recipe(tmp_path, 1.0, 1.0, 400)
    proc = subprocess.Popen([sys.executable, "-m", "hastune", "evaluate", str(rec), "-c",
                             str(CONFIG), "--evaluator", "real", "--engine", "vllm",
                             "--launch-cmd", standin(tmp_path, ttft=0.01, tpot=0.01), "-n",
                             "60"], env=env(mark, tmp_path), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "standin.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
        assert proc.poll() is None  # still running
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    assert "most recent call first" in out and "hastune" in out, out[-3000:]
    assert gone(mark) == []


def test_refusals_exit_2(tmp_path: Path) -> None:
    rec = recipe(tmp_path, 0.1, 0.02, 4)
    base = [sys.executable, "-m", "hastune", "evaluate", str(rec), "-c", str(CONFIG)]
    e = {**env(uuid.uuid4().hex, tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    cases = {
        "needs 2 GPUs": [*base, "--evaluator", "real", "--engine", "vllm"],
        "unknown engine": [*base, "--evaluator", "real", "--engine", "tgi"],
        "--evaluator real": [*base, "--engine", "vllm"],
        "exited (3) before it served": [*base, "--evaluator", "real", "--engine", "sglang",
                                        "--launch-cmd", "echo no such engine; exit 3"],
    }
    for why, argv in cases.items():
        p = subprocess.run(argv, capture_output=True, text=True, env=e, cwd=ROOT, timeout=60)
        assert p.returncode == 2, (why, p.stdout, p.stderr)
        assert why in p.stdout + p.stderr
        assert "Traceback" not in p.stderr


FAKE_SERVER = """#!/usr/bin/env bash
# a stand-in for {prog}: serves hastune.standin on the --port it is given
port=""
while [ $# -gt 0 ]; do
  if [ "$1" = --port ]; then port="$2"; fi
  shift
done
exec {python} -m hastune.standin --port "$port" --ttft 0.02 --tpot 0.005
"""


def fake_bin(tmp: Path) -> Path:
    """vllm, vllm-router and nvidia-smi (two GPUs) that the exported scripts find on PATH."""
    b = tmp / "bin"
    b.mkdir()
    for prog in ("vllm", "vllm-router"):
        (b / prog).write_text(FAKE_SERVER.format(prog=prog, python=sys.executable))
    (b / "nvidia-smi").write_text("#!/usr/bin/env bash\n"
                                  "echo 'GPU 0: Fake (UUID: GPU-0)'\n"
                                  "echo 'GPU 1: Fake (UUID: GPU-1)'\n")
    if shutil.which("curl") is None:  # launch.sh polls /health with curl -sf URL
        (b / "curl").write_text(f"#!{sys.executable}\nimport sys, urllib.request\n"
                                "try:\n    urllib.request.urlopen(sys.argv[-1], timeout=5)\n"
                                "except Exception:\n    sys.exit(22)\n")
    for f in b.iterdir():
        f.chmod(0o755)
    return b


def test_the_exported_launch_runs_and_ends(tmp_path: Path) -> None:
    """Without --launch-cmd: hastune export's scripts (launch.sh, replica.sh, router.sh) start
    in a scratch folder, launch.sh waits for every server's /health, the search measures the
    router's endpoint, and every process of the tree ends with the run."""
    from hastune.evaluators.openai import port_free

    busy = [p for p in (8000, 8400, 8401) if not port_free(p)]
    if busy:
        pytest.skip(f"ports {busy} (the exported deployment's) are in use here")
    mark = uuid.uuid4().hex
    rec = recipe(tmp_path, 0.1, 0.02, 4, max_probes=3, start=40.0)
    e = {**env(mark, tmp_path), "PATH": f"{fake_bin(tmp_path)}:{os.environ['PATH']}"}
    e.pop("CUDA_VISIBLE_DEVICES", None)
    e.pop("HASTUNE_ENGINE_CMD", None)
    p = subprocess.run([sys.executable, "-m", "hastune", "evaluate", str(rec), "-c",
                        str(CONFIG), "--evaluator", "real", "--engine", "vllm", "-n", "60",
                        "--json"], capture_output=True, text=True, timeout=120, env=e,
                       cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout)
    assert out["launch"].endswith("launch.sh") and out["endpoint"] == "http://127.0.0.1:8000/v1"
    assert all(pr["passed"] for pr in out["probes"]) and len(out["probes"]) == 3
    assert "this machine's GPUs are Fake" in out["gpu_note"]  # the recipe says cpu
    logs = Path(out["logs"]) / "logs"
    assert {f.name for f in logs.iterdir()} >= {"R0.log", "R1.log", "router.log"}
    assert gone(mark) == []


def test_tune_measures_each_trial_on_the_engine(tmp_path: Path) -> None:
    """`hastune tune --evaluator real --engine vllm`: every evaluated trial is a search on
    its own launch of the stand-in (fixed latencies: each passes up to its probes' cap)."""
    mark = uuid.uuid4().hex
    rec = recipe(tmp_path, 0.1, 0.02, 4, max_probes=3, start=40.0)
    data = yaml.safe_load(rec.read_text())
    data["architecture"] = "nodg"
    rec.write_text(yaml.safe_dump(data))
    out = tmp_path / "tune"
    p = subprocess.run([sys.executable, "-m", "hastune", "tune", str(rec), "--evaluator",
                        "real", "--engine", "vllm", "--launch-cmd",
                        standin(tmp_path, ttft=0.05, tpot=0.01), "--trials", "2", "--out",
                        str(out), "--no-plots", "--json"], capture_output=True, text=True,
                       timeout=120, env=env(mark, tmp_path), cwd=ROOT)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    grid = RateGrid(TOL)
    cap = grid.rate(grid.index(40.0) + 2 * grid.steps(2.0))
    assert summary["evaluations"] >= 1
    assert summary["goodput_rps"] == pytest.approx(cap)
    assert (out / "best_config.yaml").exists()
    assert gone(mark) == []
    p = subprocess.run([sys.executable, "-m", "hastune", "tune", str(rec), "--evaluator",
                        "real", "--engine", "vllm", "--workers", "2", "--out",
                        str(tmp_path / "t2")], capture_output=True, text=True, timeout=60,
                       env=env(mark), cwd=ROOT)
    assert p.returncode == 2 and "one at a time" in p.stdout + p.stderr


def test_an_engine_that_dies_mid_run_is_an_error(tmp_path: Path) -> None:
    """The server exits during the first probe: exit 2 with its log, not a goodput."""
    mark = uuid.uuid4().hex
    rec = recipe(tmp_path, 1.0, 1.0, 100, start=40.0)  # each request ~1 s: mid-probe
    cmd = (f"{standin(tmp_path, ttft=0.05, tpot=0.01)} & pid=$!; sleep 2; "
           "echo standin gone; kill $pid; wait $pid; exit 7")
    p = evaluate(rec, cmd, mark)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "exited (7) during the probe" in p.stdout + p.stderr
    assert "standin gone" in p.stdout + p.stderr
    assert gone(mark) == []
