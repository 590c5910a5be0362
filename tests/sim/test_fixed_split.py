"""A fixed SM split (sm_split: what CUDA MPS runs on vLLM and SGLang): the encoder gets share f
for every batch and its co-resident local prefill 1 − f at all times, also while the encoder
idles; EAServe's dynamic split gives the local prefill the whole GPU then."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.archs.epd import EPDConfig
from hastune.config import dump_config, parse_config
from hastune.errors import InputError
from hastune.sim import encode as enc_mod
from hastune.sim import epd as epd_mod


def _record(monkeypatch):
    """Every SM share a run gives its encoders and its local prefills, read from the Python
    reference path's workers (the compiled core is the same run: tests/sim/test_core.py)."""
    monkeypatch.setenv("HASTUNE_SIM_CORE", "python")
    seen = {"encode": [], "local": []}
    start, set_share = enc_mod.EncodeWorker.start, epd_mod._EPDRun._set_local_share
    init = epd_mod.PrefillWorker.__init__

    def rec_start(self, t, toks):
        done = start(self, t, toks)
        seen["encode"].append(self.share)
        return done

    def rec_share(self, w, t, share):
        seen["local"].append(share)
        return set_share(self, w, t, share)

    def rec_init(self, spec, gpu, **kw):  # local prefills are made with their share
        if "share" in kw:
            seen["local"].append(kw["share"])
        return init(self, spec, gpu, **kw)

    monkeypatch.setattr(enc_mod.EncodeWorker, "start", rec_start)
    monkeypatch.setattr(epd_mod._EPDRun, "_set_local_share", rec_share)
    monkeypatch.setattr(epd_mod.PrefillWorker, "__init__", rec_init)
    return seen


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n_E=st.integers(1, 3), n_P=st.integers(0, 2), n_D=st.integers(1, 3),
       B=st.sampled_from([1, 2, 4, 8]), f=st.sampled_from([0.1, 0.25, 0.5, 0.8]),
       s=st.sampled_from([0.0, 0.5]), rate=st.sampled_from([2.0, 8.0, 30.0]))
def test_a_fixed_split_holds_at_every_batch_and_every_idle(audio_eval, monkeypatch, n_E, n_P,
                                                            n_D, B, f, s, rate):
    s = s if n_P else 0.0
    with monkeypatch.context() as m:
        seen = _record(m)
        cfg = EPDConfig(architecture="epd", n_E=n_E, n_P=n_P, n_D=n_D, B=B, s=s, sm_split=f)
        run = audio_eval.run(cfg, rate)
    assert run.completed > 0 and seen["encode"]
    assert set(seen["encode"]) == {f}
    assert seen["local"] and set(seen["local"]) == {1.0 - f}


def test_the_dynamic_split_gives_an_idle_encoders_gpu_to_its_prefill(audio_eval, monkeypatch):
    seen = _record(monkeypatch)
    audio_eval.run(EPDConfig(architecture="epd", n_E=2, n_P=0, n_D=2, B=4, s=0.0), 5.0)
    assert 1.0 in seen["local"] and any(x < 1.0 for x in seen["local"])
    assert len(set(seen["encode"])) >= 1 and max(seen["encode"]) < 1.0


def test_a_fixed_split_needs_a_local_prefill_and_a_share_inside_the_gpu():
    base = dict(architecture="epd", n_E=2, n_P=1, n_D=2, B=4)
    with pytest.raises(InputError, match="sm_split.*s = 1"):
        parse_config({**base, "s": 1.0, "sm_split": 0.3})
    for bad in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(InputError, match="sm_split"):
            parse_config({**base, "s": 0.5, "sm_split": bad})


def test_a_config_without_a_fixed_split_dumps_as_before():
    cfg = parse_config(dict(architecture="epd", n_E=2, n_P=1, n_D=2, B=4, s=0.5))
    assert "sm_split" not in dump_config(cfg)
    fixed = parse_config(dict(architecture="epd", n_E=2, n_P=1, n_D=2, B=4, s=0.5,
                              sm_split=0.2))
    assert dump_config(fixed)["sm_split"] == 0.2 and parse_config(dump_config(fixed)) == fixed
