"""What a result records about the engine terms its runs had (engine_terms.record): on, whose
(the GPU's own fitted terms, or the engine's pooled ones on a GPU without measured runs) and
their values, or off and why; in `hastune simulate` / `evaluate` output and tune's summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune import engine_terms as et
from hastune.cli.common import terms_line
from hastune.engine_fitted import FITTED, POOLED
from hastune.evaluators.sim import Evaluation
from hastune.model_ref import Engine
from hastune.profile import load_profile
from hastune.recipe import Recipe

ROOT = Path(__file__).resolve().parents[2]
PROFILE = load_profile(ROOT / "profiles" / "a100-80gb" / "llama-30b.yaml")
MEASURED = load_profile(next((ROOT / "profiles" / "cpu").glob("*.yaml")))
GPUS = ("h100-80gb", "h200-141gb", "a100-80gb", "a800-80gb", "l20-48gb")


@given(engine=st.sampled_from(("vllm", "sglang", "trtllm")), gpu=st.sampled_from(GPUS),
       gib=st.floats(16, 192))
@settings(max_examples=60, deadline=None)
def test_a_record_of_terms_on_names_whose_they_are_and_their_values(engine, gpu, gib):
    prof = PROFILE.model_copy(update={"gpu": gpu})
    t = et.terms_for(engine, gpu, gib)
    rec = et.record(Engine(name=engine, terms=True), prof, t)
    json.dumps(rec)  # it goes into JSON output as it is
    assert rec["on"] and rec["engine"] == engine and rec["gpu"] == gpu
    own = (engine, gpu) in FITTED
    assert rec["fitted_for"] == (gpu if own else "pooled")
    row = FITTED[(engine, gpu if own else POOLED[engine])]
    assert rec["kernel_scale"] == row["kernel_scale"] and rec["per_seq_s"] == row["per_seq_s"]
    assert rec["fitted_on"] == row["fitted_on"]
    assert rec["scheduler"]["chunk_tokens"] == t.scheduler.chunk_tokens
    line = terms_line(rec)
    assert line.startswith("engine terms on") and gpu in line
    assert ("pooled" in line) == (not own)


@given(engine=st.sampled_from(("vllm", "sglang", "trtllm")), terms=st.booleans())
@settings(max_examples=20, deadline=None)
def test_a_record_of_terms_off_says_why(engine, terms):
    e = Engine(name=engine, terms=terms)
    off = et.record(e, MEASURED, et.for_profile(e, MEASURED))  # measured: never on
    assert not off["on"] and "measured" in off["why"]
    rec = et.record(e, PROFILE, et.for_profile(e, PROFILE))
    assert rec["on"] == terms
    if not terms:
        assert "kernels alone" in rec["why"] and "engine.terms is false" in rec["why"]
        assert terms_line(rec).startswith(f"engine terms off ({engine})")


def _recipe(tmp: Path, terms: bool) -> Path:
    data = yaml.safe_load((ROOT / "examples" / "audio-ultravox-8xa100.yaml").read_text())
    data["engine"] = {"name": "vllm", "terms": terms}
    p = tmp / f"terms-{terms}.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_simulate_and_the_evaluation_record_the_terms_they_ran_with(tmp_path):
    for terms in (False, True):
        p = _recipe(tmp_path, terms)
        ev = Evaluation(Recipe.model_validate(yaml.safe_load(p.read_text())))
        assert ev.describe()["engine_terms"]["on"] == terms == (ev.engine_terms is not None)
        r = subprocess.run([sys.executable, "-m", "hastune", "simulate", str(p), "--config",
                            "examples/configs/epd-2-2-4.yaml", "--rate", "5", "--requests",
                            "200", "--json"], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode in (0, 3), r.stderr
        rec = json.loads(r.stdout)["engine_terms"]
        assert rec["on"] == terms
        if terms:  # A100 has no measured runs: vLLM's pooled terms
            assert rec["fitted_for"] == "pooled" and rec["gpu"] == "a100-80gb"
            assert rec["kernel_scale"] == FITTED[("vllm", POOLED["vllm"])]["kernel_scale"]
