"""Generated malformed recipes (hypothesis): fields deleted, values of the wrong type, NaN and
±inf, huge and tiny numbers, injected into valid recipes. The CLI must answer each with exit 0
or with exit 2 and one line with a fix, never a traceback, and quickly.

The CLI runs in this process (hastune.cli.main, as `python -m hastune` calls it) so a hundred
inputs cost seconds; tests/robustness/test_bad_inputs.py runs the subprocess. Examples are
derandomised (the same inputs in every CI run); HASTUNE_ROBUSTNESS_EXAMPLES=N explores more.
"""

from __future__ import annotations

import copy
import json
import math
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.robustness.inputs import CONFIG, LIMIT_S, REPO, Result, hastune_here, load, write

BASES = {  # a valid recipe and a deployment it can run
    "audio": (load(REPO / "examples" / "audio-ultravox-8xa100.yaml"), CONFIG),
    "image": (load(REPO / "examples" / "image-llava-8xa100.yaml"), CONFIG),
    "reference-cpu": (load(REPO / "examples" / "reference-cpu.yaml"),
                      REPO / "examples" / "configs" / "reference-cpu-epd.yaml"),
}
# optional fields the examples leave out, so mutations reach them too
EXTRA = {
    "workload.rate_schedule": {"shape": "linear", "points": [[0, 1.0], [30, 2.0]]},
    "workload.max_context": 4096,
    "workload.arrival": {"process": "gamma", "cv": 1.5},
    "evaluator": {"tolerance": 0.05, "max_probes": 12, "min_requests": 100,
                  "max_requests": 2000},
    "slo.criterion": "attainment",
}
EXAMPLES = int(os.environ.get("HASTUNE_ROBUSTNESS_EXAMPLES", "60"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 100,
                    database=None, suppress_health_check=[HealthCheck.too_slow])

NASTY = [math.nan, math.inf, -math.inf, 1e12, -1e12, 10**30, 1e308, -1, 0, 1e-300, 0.5, 3,
         True, None, "x", "", [], [1, 2], {}, {"a": 1}, 2**63, -(2**63)]


def paths(d: object, prefix: str = "") -> list[str]:
    """Every dotted path of a mapping (lists are leaves)."""
    out: list[str] = []
    if isinstance(d, dict):
        for k, v in d.items():
            p = f"{prefix}.{k}" if prefix else str(k)
            out.append(p)
            out += paths(v, p)
    return out


def apply(data: dict, op: str, path: str, value: object, power: int = 0) -> None:
    """Delete the field at `path`, set it to `value`, or (`scale`) multiply a number there by
    10**power (same type: a valid recipe pushed to extremes)."""
    *head, last = path.split(".")
    node = data
    for k in head:
        if not isinstance(node, dict):
            return
        node = node.setdefault(k, {})
    if not isinstance(node, dict):
        return
    old = node.get(last)
    if op == "delete":
        node.pop(last, None)
    elif op == "scale":
        if isinstance(old, bool) or not isinstance(old, (int, float)):
            return
        node[last] = old * 10**power if isinstance(old, int) and power >= 0 else old * 10.0**power
    else:
        node[last] = value


@st.composite
def mutated(draw: st.DrawFn, pool: tuple[str, ...] | None = None) -> tuple[dict, Path]:
    base = draw(st.sampled_from(sorted(BASES)))
    data = copy.deepcopy(BASES[base][0])
    for p, v in EXTRA.items():
        if draw(st.booleans()):
            apply(data, "set", p, copy.deepcopy(v))
    for _ in range(draw(st.integers(1, 3))):
        choices = [p for p in paths(data) if pool is None or p.split(".")[0] in pool]
        path = draw(st.sampled_from(choices))
        op = draw(st.sampled_from(["delete", "set", "set", "scale", "scale"]))
        value = draw(st.one_of(st.sampled_from(NASTY),
                               st.floats(allow_nan=True, allow_infinity=True),
                               st.integers(-(10**15), 10**15)))
        apply(data, op, path, value, draw(st.integers(-9, 9)))
    return data, BASES[base][1]


def check(r: Result, what: str, codes: tuple[int, ...] = (0, 2)) -> None:
    assert r.code in codes, (r.code, r.stderr[-2000:], r.stdout[-2000:])
    if r.code == 3:  # the run missed its (mutated) SLOs: its JSON says so
        out = json.loads(r.stdout)
        assert out["exit_code"] == 3 and not out.get("passes", out["slo_met"]), out
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    if r.code == 2:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and "Fix:" in lines[0], r.stderr
    assert r.cpu_s < LIMIT_S, f"{what}: {r.cpu_s:.1f} CPU-s"


@SETTINGS
@given(case=mutated())
def test_validate_answers_every_generated_recipe(case: tuple[dict, Path]) -> None:
    data, _ = case
    with tempfile.TemporaryDirectory() as d:
        path = write(Path(d) / "recipe.yaml", data)
        check(hastune_here("validate", path), "validate")


# simulate: the workload, SLOs and cluster mutated (the evaluator's run lengths left as they
# are, so a valid recipe simulates in a fraction of a second)
@settings(SETTINGS, max_examples=max(EXAMPLES // 3, 10))
@given(case=mutated(pool=("workload", "slo", "cluster", "seed")))
def test_simulate_answers_every_generated_recipe(case: tuple[dict, Path]) -> None:
    data, config = case
    data["evaluator"] = {"min_requests": 0, "max_requests": 400, "min_span": 5.0}
    with tempfile.TemporaryDirectory() as d:
        path = write(Path(d) / "recipe.yaml", data)
        check(hastune_here("simulate", path, "--config", config, "--rate", "2", "-n", "100",
                           "--json"), "simulate", codes=(0, 2, 3))


@st.composite
def mutated_file(draw: st.DrawFn, src: dict, extra: dict) -> dict:
    data = copy.deepcopy(src)
    for p, v in extra.items():
        if draw(st.booleans()):
            apply(data, "set", p, v)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(data)))
        value = draw(st.one_of(st.sampled_from(NASTY), st.floats(), st.integers(-(10**6), 10**6)))
        apply(data, draw(st.sampled_from(["delete", "set", "scale"])), path, value,
              draw(st.integers(-6, 6)))
    return data


SHORT = {**BASES["audio"][0], "evaluator": {"min_requests": 0, "max_requests": 400,
                                            "min_span": 5.0}}


@settings(SETTINGS, max_examples=max(EXAMPLES // 3, 10))
@given(data=mutated_file(load(CONFIG), {"tp_E": 1, "sm_budget": 0.2, "max_gap_ms": 50}))
def test_simulate_answers_every_generated_config(data: dict) -> None:
    with tempfile.TemporaryDirectory() as d:
        rec = write(Path(d) / "recipe.yaml", SHORT)
        cfg = write(Path(d) / "deploy.yaml", data)
        check(hastune_here("simulate", rec, "--config", cfg, "--rate", "2", "-n", "100",
                           "--json"), "simulate")


@settings(SETTINGS, max_examples=max(EXAMPLES // 3, 10))
@given(data=mutated_file(load(REPO / "profiles" / "a100-80gb" / "ultravox-v0.6-27b.yaml"), {}))
def test_validate_answers_every_generated_profile(data: dict) -> None:
    with tempfile.TemporaryDirectory() as d:
        prof = write(Path(d) / "prof.yaml", data)
        check(hastune_here("validate", prof), "validate")
        rec = write(Path(d) / "recipe.yaml", {**SHORT, "profile": str(prof)})
        check(hastune_here("simulate", rec, "--config", CONFIG, "--rate", "2", "-n", "100",
                           "--json"), "simulate")
