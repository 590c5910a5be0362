"""An exported deployment starts, serves and stops (issue 35: launch files that start).

EAServe's answer with a co-resident prefill (epd, s < 1, a fixed SM split) is exported for
vLLM, and its launch.sh is run as written, with `vllm serve` and `nvidia-cuda-mps-control`
replaced by stand-ins (tests/e2e/stub_vllm.py: a GPU-less machine has neither): the MPS daemon
starts on the encode GPUs, every server starts on its port with its GPUs and SM share, the
hastune gateway comes up in front of them from gateway.yaml, a multimodal and a text request
go through encode → prefill → decode and stream back, and Ctrl-C (TERM) stops everything, MPS
last. Fixed ports (8000, 81xx–83xx, as export writes them): marked `engine`, so it runs alone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from hastune.config import parse_config
from hastune.export import export
from hastune.export.engines import MPS_PIPE
from hastune.export.target import build_target
from hastune.recipe import load_recipe

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]


def _bin(tmp: Path) -> Path:
    d = tmp / "bin"
    d.mkdir()
    for name, args in (("vllm", ""), ("nvidia-cuda-mps-control", "mps "),
                       ("hastune", None)):
        run = (f'-m tests.e2e.stub_vllm {args}"$@"' if args is not None else '-m hastune "$@"')
        (d / name).write_text(f"#!/bin/sh\nexec {sys.executable} {run}\n")
        (d / name).chmod(0o755)
    return d


def _post(body: dict, timeout: float = 60) -> tuple[int, bytes]:
    req = urllib.request.Request("http://127.0.0.1:8000/v1/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read()


def test_an_exported_co_resident_epd_deployment_starts_serves_and_stops(tmp_path):
    cfg = parse_config({"architecture": "epd", "n_E": 2, "n_P": 1, "n_D": 1, "B": 2, "s": 0.5,
                        "sm_split": 0.25})
    rec = load_recipe(ROOT / "examples" / "audio-ultravox-8xa100.yaml")
    res = export(cfg, build_target(rec, cfg, 10.0), "vllm", tmp_path / "deploy")
    assert res.written
    busy = [p for p in (8000, 8100, 8101, 8200, 8201, 8202, 8300) if not _free(p)]
    assert not busy, f"ports the export uses are taken here: {busy}"
    stub_log = tmp_path / "stubs.jsonl"
    env = {**os.environ, "PATH": f"{_bin(tmp_path)}:{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT), "STUB_LOG": str(stub_log),
           "LOG_DIR": str(tmp_path / "logs"), "HEALTH_TIMEOUT": "150"}
    proc = subprocess.Popen(["bash", str(tmp_path / "deploy" / "launch.sh")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, text=True)
    out: list[str] = []
    threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True).start()

    def logs() -> str:
        files = sorted((tmp_path / "logs").glob("*.log"))
        return "".join(out) + "".join(f"\n--- {f.name}\n{f.read_text()[-2000:]}" for f in files)

    try:
        deadline = time.monotonic() + 180
        while not any("serving at" in line for line in out):
            assert proc.poll() is None, f"launch.sh exited {proc.returncode}:\n{logs()}"
            assert time.monotonic() < deadline, f"no 'serving at' in 180 s:\n{logs()}"
            time.sleep(0.5)
        image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
        status, raw = _post({"model": "m", "stream": True, "max_tokens": 3, "messages": [
            {"role": "user", "content": [image, {"type": "text", "text": "what is it?"}]}]})
        text = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content", "")
                       for line in raw.decode().splitlines()
                       if line.startswith("data: ") and line != "data: [DONE]")
        assert status == 200 and text == "one two three", raw
        for k in range(3):  # text only: through a co-resident prefill or the remote pool
            status, raw = _post({"model": "m", "max_tokens": 3, "messages": [
                {"role": "user", "content": f"hello {k}"}]})
            assert status == 200 and json.loads(raw)["choices"][0]["message"]["content"] \
                == "one two three"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    events = [json.loads(line) for line in stub_log.read_text().splitlines()]
    starts = {e["server"]: e for e in events if e["event"] == "start"}
    # every server on its port and GPUs; the pairs under MPS with 25% / 75% of the SMs
    assert sorted(starts) == ["decode:8300", "encode:8100", "encode:8101", "prefill:8200",
                              "prefill:8201", "prefill:8202"], starts
    for name, gpu, pct in (("encode:8100", "0", "25"), ("encode:8101", "1", "25"),
                           ("prefill:8201", "0", "75"), ("prefill:8202", "1", "75")):
        e = starts[name]["env"]
        assert (e["CUDA_VISIBLE_DEVICES"], e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"],
                e["CUDA_MPS_PIPE_DIRECTORY"]) == (gpu, pct, MPS_PIPE), name
    for name, gpu in (("prefill:8200", "2"), ("decode:8300", "3")):
        e = starts[name]["env"]
        assert e["CUDA_VISIBLE_DEVICES"] == gpu and e["CUDA_MPS_PIPE_DIRECTORY"] is None
    # the daemon on the two encode GPUs, started before any server and told to quit at the end
    mps = [e for e in events if e["event"] == "mps"]
    assert [m["args"] for m in mps] == [["-d"], []], mps
    assert mps[0]["env"] == {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_MPS_PIPE_DIRECTORY": MPS_PIPE}
    assert mps[1]["stdin"].strip() == "quit" and mps[1]["env"]["CUDA_MPS_PIPE_DIRECTORY"] \
        == MPS_PIPE
    assert mps[0]["t"] < min(s["t"] for s in starts.values()) and mps[1]["t"] > max(
        e["t"] for e in events if e["event"] == "request")
    # the hand-off as vLLM's E/P/D servers need it; nothing refused
    assert not [e for e in events if e["event"] == "refused"], events
    served = [e for e in events if e["event"] == "request"]
    assert sum(e["role"] == "encode" for e in served) == 1  # the one image
    assert sum(e["role"] == "prefill" for e in served) == 4 == sum(
        e["role"] == "decode" for e in served)
    # everything it started is gone (each server within a graceful shutdown's time)
    deadline = time.monotonic() + 60
    left = [s["pid"] for s in starts.values()]
    while left and time.monotonic() < deadline:
        left = [p for p in left if _alive(p)]
        time.sleep(0.2)
    assert not left, f"still running after TERM: {left}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0
