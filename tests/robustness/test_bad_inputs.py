"""Every bad input of issue 11 (and its neighbours) through the real CLI: exit code 2, one
line naming the file and the field, a "Fix:", no traceback, answered in under 5 CPU-seconds.

Each builder writes its inputs under tmp_path and returns (CLI args, text naming the file,
text naming the field or the problem). The issue's cases come first, in its order.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.robustness.inputs import (
    CONFIG,
    GOOD_LINE,
    LIMIT_S,
    PROFILE,
    RECIPE,
    REPO,
    bomb,
    edited,
    hastune,
    put,
    text,
)

Case = Callable[[Path], tuple[list, str, str]]


def recipe(t: Path, *changes: Callable[[dict], object], name: str = "recipe.yaml") -> Path:
    def change(d: dict) -> None:
        for c in changes:
            c(d)
    return edited(RECIPE, t / name, change)


def traced(t: Path, body: str | bytes) -> Path:
    text(t / "trace.jsonl", body)
    return recipe(t, put("workload.trace", "trace.jsonl"))


def spaced(t: Path, body: str) -> Path:
    text(t / "space.yaml", body)
    return recipe(t, put("search_space", "space.yaml"))


def sim(r: Path, *extra: str) -> list:
    return ["simulate", r, "--config", CONFIG, "--rate", "1", "-n", "50", *extra]


def huge_sparse(t: Path) -> Path:
    p = t / "huge.yaml"
    with p.open("wb") as fh:  # 50 MB by stat, nothing written: the size alone must refuse it
        fh.truncate(50 * 2**20)
    return p


def fifo(t: Path) -> Path:
    p = t / "pipe.yaml"
    os.mkfifo(p)  # reading it would block forever
    return p


def model_json(t: Path, name: str, **changes: object) -> Path:
    """A copy of the Llama-3.1-8B config.json at t/name with `changes` to its keys."""
    data = json.loads((REPO / "examples" / "models" / "llama-3.1-8b" / "config.json")
                      .read_text(encoding="utf-8"))
    data.update(changes)
    return text(t / name, json.dumps(data))


def modelled(t: Path, config: Path) -> Path:
    """A recipe whose model is the config.json `config` (with a profile: its file names it)."""
    return recipe(t, put("model", str(config)))


def deep_json(t: Path) -> Path:
    return text(t / "deep.json", "[" * 200_000 + "]" * 200_000)


BINARY = bytes(range(256)) * 16
TORCH = importlib.util.find_spec("torch") is not None
BOMB = "more than 100,000 YAML nodes"
SPACE_NAN = ("architecture: epd\nparams:\n  n_E: {low: 1}\n  n_P: {low: 0}\n  n_D: {low: 1}\n"
             "  B: [4]\n  s: [0.5, .nan]\n  p: [0.6]\n")

CASES: dict[str, Case] = {
    # -- hangs --------------------------------------------------------------------------
    "alias-bomb-validate": lambda t: (["validate", text(t / "bomb.yaml", bomb())], "bomb.yaml",
                                      BOMB),
    "alias-bomb-prune": lambda t: (["prune", text(t / "bomb.yaml", bomb())], "bomb.yaml", BOMB),
    "50MB-recipe": lambda t: (["validate", huge_sparse(t)], "huge.yaml", "MiB limit"),
    # -- tracebacks ---------------------------------------------------------------------
    "nan-mix-weight": lambda t: (
        ["validate", recipe(t, put("workload.mix", {"audio": float("nan")}))],
        "recipe.yaml", "workload.mix.audio"),
    "nan-mix-weight-simulate": lambda t: (
        sim(recipe(t, put("workload.mix", {"audio": float("nan")}))),
        "recipe.yaml", "workload.mix.audio"),
    "binary-trace": lambda t: (["validate", traced(t, bytes(range(256)) * 64)], "trace.jsonl",
                               "line 1"),
    "binary-trace-not-utf8": lambda t: (
        ["validate", traced(t, GOOD_LINE.encode() + bytes(range(255, 0, -1)) * 64)],
        "trace.jsonl", "line 2"),
    "trace-is-a-directory": lambda t: (
        ["validate", recipe(t, put("workload.trace", str(t)))], str(t), "directory"),
    "nan-length-in-trace-validate": lambda t: (
        ["validate", traced(t, GOOD_LINE + '{"prompt_tokens": NaN, "output_tokens": 5}\n')],
        "trace.jsonl", "line 2: prompt_tokens"),
    "nan-length-in-trace-simulate": lambda t: (
        sim(traced(t, GOOD_LINE + '{"prompt_tokens": NaN, "output_tokens": 5}\n')),
        "trace.jsonl", "line 2: prompt_tokens"),
    "rate-nan": lambda t: (["simulate", RECIPE, "--config", CONFIG, "--rate", "nan"],
                           "--rate", "finite"),
    "rate-inf": lambda t: (["simulate", RECIPE, "--config", CONFIG, "--rate", "inf"],
                           "--rate", "finite"),
    "evaluate-requests-negative": lambda t: (
        ["evaluate", RECIPE, "--config", CONFIG, "--requests", "-10"], "--requests", "-10"),
    "cluster-gpus-1e12": lambda t: (["validate", recipe(t, put("cluster.gpus", 10**12))],
                                    "recipe.yaml", "cluster.gpus"),
    "cluster-gpus-1e12-float": lambda t: (["validate", recipe(t, put("cluster.gpus", 1e12))],
                                          "recipe.yaml", "cluster.gpus"),
    # -- accepted though wrong ----------------------------------------------------------
    "mix-sums-to-0.3": lambda t: (["validate", recipe(t, put("workload.mix", {"audio": 0.3}))],
                                  "recipe.yaml", "workload.mix"),
    "mix-sums-to-3": lambda t: (
        ["validate", recipe(t, put("workload.mix", {"audio": 2.0, "text": 1.0}))],
        "recipe.yaml", "workload.mix"),
    "mix-inf": lambda t: (
        ["validate", recipe(t, put("workload.mix", {"audio": float("inf")}))],
        "recipe.yaml", "workload.mix.audio"),
    "slo-ttft-inf": lambda t: (["validate", recipe(t, put("slo.ttft_s", float("inf")))],
                               "recipe.yaml", "slo.ttft_s"),
    "architecture-empty-list": lambda t: (["validate", recipe(t, put("architecture", []))],
                                          "recipe.yaml", "architecture"),
    "architecture-twice": lambda t: (["validate", recipe(t, put("architecture", ["epd", "epd"]))],
                                     "recipe.yaml", "architecture"),
    "output-tokens-1e9": lambda t: (["validate", recipe(t, put("workload.output_tokens", 1e9))],
                                    "recipe.yaml", "workload.output_tokens"),
    "trace-length-1e12": lambda t: (
        ["validate", traced(t, '{"prompt_tokens": 1e12, "output_tokens": 5}\n')],
        "trace.jsonl", "line 1: prompt_tokens"),
    "simulate-requests-0": lambda t: (sim(RECIPE, "--requests", "0"), "--requests", "got 0"),
    "missing-search-space": lambda t: (["validate", recipe(t, put("search_space", "nope.yaml"))],
                                       "recipe.yaml", "search_space"),
    "grid-workers-negative": lambda t: (["grid", RECIPE, "--workers", "-2"], "--workers", "-2"),
    "epd-18-gpus-on-8": lambda t: (
        ["evaluate", RECIPE, "--config", edited(CONFIG, t / "deploy.yaml", lambda d: d.update(
            n_E=6, n_P=6, n_D=6)), "-n", "50"], "deploy.yaml", "cluster.gpus"),
    # -- neighbours: files that are not files, YAML that is not plain ---------------------
    "recipe-is-a-directory": lambda t: (["validate", t], str(t), "directory"),
    "recipe-is-a-fifo": lambda t: (["validate", fifo(t)], "pipe.yaml", "pipe"),
    "recipe-is-dev-zero": lambda t: (["validate", "/dev/zero"], "/dev/zero", "device"),
    "config-is-a-fifo": lambda t: (
        ["simulate", RECIPE, "--config", fifo(t), "--rate", "1"], "pipe.yaml", "pipe"),
    "alias-loop": lambda t: (["validate", text(t / "loop.yaml", "kind: recipe\na: &x [1, *x]\n")],
                             "loop.yaml", "loop"),
    "nested-1000-deep": lambda t: (
        ["validate", text(t / "deep.yaml", "a: " + "[" * 1000 + "]" * 1000 + "\n")],
        "deep.yaml", "nest"),
    "python-tag": lambda t: (
        ["validate", text(t / "tag.yaml", "kind: recipe\nseed: !!python/object/apply:os.getpid"
                          " []\n")], "tag.yaml", "tag"),
    "binary-recipe": lambda t: (["validate", text(t / "bin.yaml", bytes(range(256)) * 8)],
                                "bin.yaml", "UTF-8"),
    # -- neighbours: non-finite or absurd numbers elsewhere ------------------------------
    "config-nan-share": lambda t: (
        ["validate", edited(CONFIG, t / "deploy.yaml", lambda d: d.update(s=float("nan")))],
        "deploy.yaml", "s"),
    "profile-nan-latency": lambda t: (
        ["validate", edited(PROFILE, t / "prof.yaml", put("decode.fixed_s", float("nan")))],
        "prof.yaml", "decode.fixed_s"),
    "profile-inf-memory-via-recipe": lambda t: (
        ["validate", recipe(t, put("profile", str(edited(
            PROFILE, t / "prof.yaml", put("memory.gpu_bytes", float("inf"))))))],
        "prof.yaml", "memory.gpu_bytes"),
    "space-nan-value": lambda t: (["validate", spaced(t, SPACE_NAN)], "space.yaml", "params.s"),
    "space-unknown-knob": lambda t: (
        ["validate", spaced(t, SPACE_NAN.replace("s: [0.5, .nan]", "share: [0.5]"))],
        "space.yaml", "share"),
    "space-too-wide-for-budget": lambda t: (["validate", recipe(t, put("cluster.gpus", 100_000))],
                                            "epd.yaml", "params"),
    "slo-tpot-nan": lambda t: (["validate", recipe(t, put("slo.tpot_s", float("nan")))],
                               "recipe.yaml", "slo.tpot_s"),
    "length-mean-inf": lambda t: (
        ["validate", recipe(t, put("workload.prompt_tokens.mean", float("inf")))],
        "recipe.yaml", "workload.prompt_tokens.mean"),
    "requests-1e12": lambda t: (["validate", recipe(t, put("workload.requests", 10**12))],
                                "recipe.yaml", "workload.requests"),
    "rate-schedule-nan": lambda t: (
        ["validate", recipe(t, put("workload.rate_schedule", {"points": [[0, float("nan")]]}))],
        "recipe.yaml", "workload.rate_schedule.points"),
    "link-bandwidth-inf": lambda t: (
        ["validate", recipe(t, put("cluster.intra_node", {"bandwidth_GBps": float("inf")}))],
        "recipe.yaml", "cluster.intra_node.bandwidth_GBps"),
    "cluster-gpus-float": lambda t: (["validate", recipe(t, put("cluster.gpus", 8.5))],
                                     "recipe.yaml", "cluster.gpus"),
    "trace-infinite-arrival": lambda t: (
        ["validate", traced(t, '{"prompt_tokens": 5, "output_tokens": 5, "arrival_s": '
                               'Infinity}\n')], "trace.jsonl", "line 1: arrival_s"),
    "trace-huge-integer": lambda t: (
        ["validate", traced(t, '{"prompt_tokens": 5, "output_tokens": 1' + "0" * 400 + "}\n")],
        "trace.jsonl", "line 1: output_tokens"),
    "trace-unhashable-modality": lambda t: (
        ["validate", traced(t, '{"prompt_tokens": 5, "output_tokens": 5, "modality": []}\n')],
        "trace.jsonl", "line 1: modality"),
    # -- neighbours: command-line values -------------------------------------------------
    "rate-zero": lambda t: (["simulate", RECIPE, "--config", CONFIG, "--rate", "0"], "--rate",
                            "> 0"),
    "rate-minus-inf": lambda t: (["simulate", RECIPE, "--config", CONFIG, "--rate", "-inf"],
                                 "--rate", "finite"),
    "evaluate-requests-0": lambda t: (["evaluate", RECIPE, "--config", CONFIG, "-n", "0"],
                                      "--requests", "got 0"),
    "simulate-requests-1e11": lambda t: (sim(RECIPE, "--requests", str(10**11)), "--requests",
                                         "10,000,000"),
    "seed-negative": lambda t: (sim(RECIPE, "--seed", "-1"), "--seed", "-1"),
    "grid-workers-0": lambda t: (["grid", RECIPE, "--workers", "0"], "--workers", "got 0"),
    # -- model config.json files (issue 14's tester) --------------------------------------
    "model-config-binary": lambda t: (["model", "inspect", text(t / "bin.json", BINARY)],
                                      "bin.json", "UTF-8"),
    "model-config-not-utf8": lambda t: (
        ["model", "inspect", text(t / "cfg.json", b'{"model_type": "llama", "x": "\xff"}')],
        "cfg.json", "UTF-8"),
    "model-config-binary-validate": lambda t: (
        ["validate", modelled(t, text(t / "bin.json", BINARY))], "recipe.yaml", "model"),
    "model-config-binary-profile-build": lambda t: (
        ["profile", "build", "--model", text(t / "bin.json", BINARY), "--gpu", "h100-80gb",
         "--out", t / "p.yaml"], "bin.json", "UTF-8"),
    "model-config-200000-deep": lambda t: (["model", "inspect", deep_json(t)], "deep.json",
                                           "deep"),
    "model-config-200000-deep-validate": lambda t: (
        ["validate", modelled(t, deep_json(t))], "recipe.yaml", "model"),
    "model-config-5000-digit-number": lambda t: (
        ["model", "inspect", text(t / "big.json", '{"num_hidden_layers": 1' + "0" * 5000 + "}")],
        "big.json", "not JSON"),
    "model-config-1e12-layers": lambda t: (
        ["model", "inspect", model_json(t, "layers.json", num_hidden_layers=10**12)],
        "layers.json", "num_hidden_layers"),
    "model-config-1e20-parameters": lambda t: (
        ["model", "inspect", model_json(t, "wide.json", hidden_size=2**30, head_dim=128,
                                        num_attention_heads=32, num_hidden_layers=1000)],
        "wide.json", "parameters"),
    "model-name-300-characters": lambda t: (
        ["validate", recipe(t, put("model", "x" * 300))], "recipe.yaml", "too long"),
    "inspect-name-300-characters": lambda t: (["model", "inspect", "y" * 300], "model",
                                              "too long"),
    "model-config-is-dev-zero": lambda t: (["model", "inspect", "/dev/zero"], "/dev/zero",
                                           "device"),
    "model-config-is-a-fifo": lambda t: (["model", "inspect", fifo(t)], "pipe.yaml", "pipe"),
    "inspect-audio-seconds-inf": lambda t: (
        ["model", "inspect", "ultravox-v0.6-27b", "--audio-seconds", "inf"], "--audio-seconds",
        "86,400"),
    "inspect-audio-seconds-nan": lambda t: (
        ["model", "inspect", "ultravox-v0.6-27b", "--audio-seconds", "nan"], "--audio-seconds",
        "86,400"),
    "inspect-image-1e8-square": lambda t: (
        ["model", "inspect", "llava-v1.6-34b", "--image", "100000000x100000000"], "--image",
        "65,536"),
    "trace-5000-digit-number": lambda t: (
        ["validate", traced(t, '{"prompt_tokens": 5, "output_tokens": 1' + "0" * 5000 + "}\n")],
        "trace.jsonl", "line 1"),
    # -- command-line values the parser or the command refuses ---------------------------
    "simulate-rate-1e308": lambda t: (["simulate", RECIPE, "--config", CONFIG, "-r", "1e308"],
                                      "--rate", "1,000,000"),
    "simulate-rate-fast": lambda t: (["simulate", RECIPE, "--config", CONFIG, "-r", "fast"],
                                     "--rate", "a number > 0"),
    "simulate-seed-word": lambda t: (sim(RECIPE, "--seed", "x"), "--seed", "whole number ≥ 0"),
    "tune-trials-many": lambda t: (["tune", RECIPE, "--trials", "many"], "--trials",
                                   "whole number"),
    "profile-threads-0": lambda t: (
        ["profile", "--model", "ref-tiny", "--device", "cpu", "--out", t / "p.yaml",
         "--threads", "0"], "--threads", "≥ 1"),
    "serve-rate-nan": lambda t: (["serve", CONFIG, "--recipe", RECIPE, "--rate", "nan"],
                                 "--rate", "finite"),
    "fidelity-engine-bogus": lambda t: (
        ["fidelity", REPO / "hastune" / "data" / "calibration" / "e2e" / "silicon_llama31.csv",
         "--engine", "bogus"], "--engine", "vllm, sglang, trtllm"),
    "tune-out-under-proc": lambda t: (["tune", RECIPE, "--out", "/proc/x"], "/proc/x", "--out"),
    # -- work that cannot finish in reasonable time: refused with the arithmetic ----------
    "prune-requests-1e7": lambda t: (
        ["prune", recipe(t, put("workload.requests", 10**7))], "recipe.yaml",
        "workload.requests"),
    "simulate-requests-1e7": lambda t: (
        ["simulate", recipe(t, put("workload.requests", 10**7)), "--config", CONFIG, "-r", "1"],
        "recipe.yaml", "workload.requests"),
    "evaluate-requests-1e7": lambda t: (
        ["evaluate", recipe(t, put("workload.requests", 10**7)), "--config", CONFIG],
        "recipe.yaml", "workload.requests"),
    "tune-requests-1e7": lambda t: (
        ["tune", recipe(t, put("workload.requests", 10**7)), "--out", t / "out"],
        "recipe.yaml", "workload.requests"),
    **({"profile-factory-not-a-model": lambda t: (
        ["profile", "--model", "os:getcwd", "--device", "cpu", "--out", t / "p.yaml"],
        "--model", "os:getcwd")} if TORCH else {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2(case: str, tmp_path: Path) -> None:
    args, file, field = CASES[case](tmp_path)
    r = hastune(*args)
    err = r.stderr
    assert r.code == 2, (r.code, err, r.stdout[-2000:])
    assert "Traceback" not in err + r.stdout, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert file in err and field in err, err
    assert "Fix:" in err, err
    assert r.cpu_s < LIMIT_S, f"{case}: answered in {r.cpu_s:.1f} CPU-s"


def test_a_deployment_alone_has_no_budget(tmp_path: Path) -> None:
    """An epd config of 18 GPUs is a valid file on its own (no recipe, no budget); evaluated
    against an 8-GPU recipe it is refused (case epd-18-gpus-on-8)."""
    cfg = edited(CONFIG, tmp_path / "deploy.yaml", lambda d: d.update(n_E=6, n_P=6, n_D=6))
    r = hastune("validate", cfg)
    assert r.code == 0 and "18 GPUs" in r.stdout, r.stderr


def test_case_count() -> None:
    assert len(CASES) >= 50
