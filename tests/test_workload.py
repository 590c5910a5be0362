from __future__ import annotations

import json

import numpy as np
import pytest

from hastune.errors import InputError
from hastune.recipe import LengthDist, ModalityPayload, Workload
from hastune.workload import load_trace, payload_tokens, sample_lengths, sample_requests


@pytest.mark.parametrize("dist", ["lognormal", "gamma", "normal"])
def test_length_distributions_have_their_mean_and_cv(dist):
    d = LengthDist(dist=dist, mean=300, cv=0.5, min=0, max=1e9)
    x = sample_lengths(d, 200_000, np.random.default_rng(0))
    assert x.mean() == pytest.approx(300, rel=0.02)
    assert x.std() / x.mean() == pytest.approx(0.5, rel=0.05)


def test_clipping():
    d = LengthDist(dist="lognormal", mean=300, cv=2.0, min=10, max=500)
    x = sample_lengths(d, 10_000, np.random.default_rng(0))
    assert x.min() >= 10 and x.max() <= 500


def test_payload_schemes():
    rng = np.random.default_rng(0)
    enc, llm = payload_tokens(ModalityPayload(scheme="anyres-336", resolution=(672, 672)), 3, rng)
    assert llm.tolist() == [2880.0] * 3 and enc[0] == 577 * 5
    enc, llm = payload_tokens(ModalityPayload(scheme="patch-14-merge-2", resolution=(448, 448),
                                              frames=16), 1, rng)
    assert enc[0] == 8 * 1024 and llm[0] == 2048
    enc, llm = payload_tokens(ModalityPayload(scheme="whisper", seconds=30, stack=8), 1, rng)
    assert enc[0] == 1500 and llm[0] == 188


def test_common_random_numbers_across_rates():
    w = Workload(mix={"text": 1.0}, prompt_tokens=100, output_tokens=50)
    a = sample_requests(w, 500, seed=3)
    b = sample_requests(w, 500, seed=3)
    assert np.array_equal(a.gaps, b.gaps)
    assert np.allclose(a.arrivals(2.0), a.arrivals(1.0) / 2)
    assert a.gaps.mean() == pytest.approx(1.0, rel=0.1)


def test_gamma_bursts_have_their_cv():
    w = Workload(arrival={"process": "gamma", "cv": 2.0})
    g = sample_requests(w, 100_000, seed=0).gaps
    assert g.std() / g.mean() == pytest.approx(2.0, rel=0.05)


def test_trace_replay(tmp_path):
    p = tmp_path / "t.jsonl"
    rows = [{"arrival_s": 2.0 * k, "prompt_tokens": 10 + k, "output_tokens": 5,
             "modality": "image", "encoder_tokens": 577, "llm_tokens": 576} for k in range(4)]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    rs = load_trace(p, None, seed=0)
    assert len(rs) == 4 and rs.prompt_tokens.tolist() == [10, 11, 12, 13]
    assert np.allclose(np.diff(rs.arrivals(1.0)), 1.0)  # gaps normalised to unit mean


def test_empty_trace_is_an_input_error(tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_text("\n")
    with pytest.raises(InputError, match="no requests"):
        load_trace(p, None, seed=0)
