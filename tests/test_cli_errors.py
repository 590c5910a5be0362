"""Broken input reaches the user as ONE clear message: file, field, "Fix: ...", exit code 2.

Each case copies a shipped example into tmp_path, breaks one thing, and runs the real CLI
(`python -m hastune ...`) in a subprocess, since `main()` turns InputError into the message
outside the typer app.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "examples" / "audio-ultravox-8xa100.yaml"
CONFIG = REPO / "examples" / "configs" / "epd-2-2-4.yaml"
PROFILE = REPO / "profiles" / "a100-80gb" / "ultravox-v0.6-27b.yaml"


def hastune(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hastune", *map(str, args)],
        capture_output=True, text=True, timeout=120, cwd=cwd or REPO,
    )


def _edited(src: Path, dst: Path, change: Callable[[dict], object]) -> Path:
    """Copy YAML `src` to `dst`, applying `change` to the loaded mapping in place."""
    data = yaml.safe_load(src.read_text(encoding="utf-8"))
    change(data)
    dst.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return dst


def _set(dotted: str, value: object) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        *head, last = dotted.split(".")
        for key in head:
            data = data[key]
        data[last] = value
    return change


def recipe(t: Path, change: Callable[[dict], object] = lambda d: None) -> Path:
    return _edited(RECIPE, t / "recipe.yaml", change)


def config(t: Path, change: Callable[[dict], object] = lambda d: None) -> Path:
    return _edited(CONFIG, t / "deploy.yaml", change)


def text(t: Path, name: str, body: str) -> Path:
    (t / name).write_text(body, encoding="utf-8")
    return t / name


def traced(t: Path, body: str) -> Path:
    """A recipe whose workload.trace is a JSONL file `trace.jsonl` holding `body`."""
    text(t, "trace.jsonl", body)
    return recipe(t, _set("workload.trace", "trace.jsonl"))


GOOD_LINE = '{"prompt_tokens": 100, "output_tokens": 50}\n'

# id -> builder(tmp_path) -> (CLI args, name that must appear in stderr, field that must appear)
CASES: dict[str, Callable[[Path], tuple[list, str, str]]] = {
    "yaml-syntax": lambda t: (
        ["validate", text(t, "bad.yaml", "kind: recipe\nmodel: [oops\nseed: 0\n")],
        "bad.yaml", "line"),
    "yaml-list": lambda t: (
        ["validate", text(t, "list.yaml", "- kind: recipe\n- seed: 0\n")], "list.yaml", "mapping"),
    "empty-file": lambda t: (["validate", text(t, "empty.yaml", "")], "empty.yaml", "empty"),
    "duplicate-key": lambda t: (
        ["validate", text(t, "dup.yaml", RECIPE.read_text() + "seed: 1\n")], "dup.yaml", "seed"),
    "unknown-kind": lambda t: (
        ["validate", text(t, "kind.yaml", "kind: banana\nseed: 0\n")], "kind.yaml", "kind"),
    "unknown-recipe-field": lambda t: (
        ["validate", recipe(t, _set("colour", "red"))], "recipe.yaml", "colour"),
    "negative-cluster-gpus": lambda t: (
        ["validate", recipe(t, _set("cluster.gpus", -8))], "recipe.yaml", "cluster.gpus"),
    "unknown-link-preset": lambda t: (
        ["validate", recipe(t, _set("cluster.intra_node", "nvlink-z"))],
        "recipe.yaml", "cluster.intra_node"),
    "mix-without-payload": lambda t: (
        ["validate", recipe(t, _set("workload.mix", {"audio": 0.5, "image": 0.5}))],
        "recipe.yaml", "modalities.image"),
    "unknown-model": lambda t: (
        ["validate", recipe(t, _set("model", "no-such-model"))], "recipe.yaml", "model"),
    "missing-profile-file": lambda t: (
        ["validate", recipe(t, _set("profile", "nope.yaml"))], "recipe.yaml", "profile"),
    "negative-decode-latency": lambda t: (
        ["validate", _edited(PROFILE, t / "prof.yaml", _set("decode.fixed_s", -0.01))],
        "prof.yaml", "decode.fixed_s"),
    "config-s-above-1": lambda t: (["validate", config(t, _set("s", 1.5))], "deploy.yaml", "s"),
    "config-remote-share-without-pool": lambda t: (
        ["validate", config(t, _set("n_P", 0))], "deploy.yaml", "n_P"),
    "config-no-encoders": lambda t: (
        ["validate", config(t, _set("n_E", 0))], "deploy.yaml", "n_E"),
    "config-unknown-architecture": lambda t: (
        ["validate", config(t, _set("architecture", "pd"))], "deploy.yaml", "architecture"),
    "config-over-gpu-budget": lambda t: (
        ["evaluate", RECIPE, "--config", config(t, _set("n_D", 8)), "-n", "50"],
        "deploy.yaml", "cluster.gpus"),
    "trace-empty": lambda t: (["validate", traced(t, "\n")], "trace.jsonl", "no requests"),
    "trace-bad-json": lambda t: (
        ["validate", traced(t, GOOD_LINE + "{prompt_tokens: 3\n")], "trace.jsonl", "line 2"),
    "trace-missing-output-tokens": lambda t: (
        ["validate", traced(t, GOOD_LINE + '{"prompt_tokens": 10}\n')],
        "trace.jsonl", "output_tokens"),
    "trace-bad-via-evaluate": lambda t: (
        ["evaluate", traced(t, GOOD_LINE + '{"prompt_tokens": 10}\n'), "--config", CONFIG,
         "-n", "50"], "trace.jsonl", "line 2"),
    "nonexistent-file": lambda t: (
        ["validate", t / "missing.yaml"], "missing.yaml", "not found"),
    "nonexistent-config-via-simulate": lambda t: (
        ["simulate", RECIPE, "--config", t / "gone.yaml", "--rate", "1", "-n", "50"],
        "gone.yaml", "not found"),
    "negative-rate": lambda t: (
        ["simulate", RECIPE, "--config", CONFIG, "--rate", "-1", "-n", "50"], "--rate", "rate"),
}

XFAIL: dict[str, str] = {}


@pytest.mark.parametrize(
    "case",
    [pytest.param(k, marks=pytest.mark.xfail(reason=XFAIL[k], strict=True)) if k in XFAIL else k
     for k in CASES],
)
def test_broken_input_gives_one_clear_message(case: str, tmp_path: Path) -> None:
    args, name, field = CASES[case](tmp_path)
    proc = hastune(*args)
    err = proc.stderr
    assert proc.returncode == 2, (proc.returncode, err, proc.stdout)
    assert "Traceback" not in err, err
    assert err.count("error:") == 1, err
    assert len(err.strip().splitlines()) <= 3, err
    assert name in err, err
    assert field in err, err
    assert "Fix:" in err, err


def test_shipped_examples_and_profiles_validate() -> None:
    files = sorted([*REPO.glob("examples/*.yaml"), *REPO.glob("examples/configs/*.yaml"),
                    *REPO.glob("profiles/*/*.yaml")])
    assert len(files) >= 8
    proc = hastune("validate", *files)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert proc.stdout.count("ok ") == len(files), proc.stdout


def test_multi_gpu_profile_is_refused_for_epd(tmp_path):
    import yaml

    from tests.conftest import EXAMPLES

    data = yaml.safe_load((EXAMPLES / "audio-ultravox-8xa100.yaml").read_text())
    data["model"] = "qwen2-72b"
    data["workload"] = {"mix": {"text": 1.0}, "requests": 100}
    p = tmp_path / "big.yaml"
    p.write_text(yaml.safe_dump(data))
    r = subprocess.run([sys.executable, "-m", "hastune", "validate", str(p)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "qwen2-72b" in r.stderr and "tp_E" in r.stderr and "Fix:" in r.stderr


def test_input_error_survives_a_process_boundary():
    """A worker process (hastune grid --workers, multiprocessing pools) re-raises it whole in
    the parent; an unpicklable error hung the pool's result thread instead."""
    import pickle

    from hastune.errors import InputError

    e = InputError("r.yaml", "cluster.gpus", "must be ≥ 1 (got -2)", "give a GPU count")
    back = pickle.loads(pickle.dumps(e))
    assert isinstance(back, InputError) and str(back) == str(e)
    assert (back.file, back.field, back.fix) == ("r.yaml", "cluster.gpus", "give a GPU count")
