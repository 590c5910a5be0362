"""EPD pools with tensor parallelism: GPU accounting, what is refused and where, and the
simulator on TP groups (the EAServe paper's 8× RTX 6000 Ada 48 GB with LLaVA-v1.6-34B, whose
LLM needs TP 2 on a 48 GB card)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.config import parse_config
from hastune.errors import InputError
from hastune.evaluators import make_evaluator
from hastune.evaluators.sim import Evaluation
from hastune.recipe import load_recipe
from hastune.space import space_for
from tests.conftest import EXAMPLES, quick

RTX = EXAMPLES / "image-llava-8xrtx6000ada.yaml"


@pytest.fixture(scope="module")
def rtx():
    rec = quick(load_recipe(RTX))
    return rec.model_copy(update={"workload": rec.workload.model_copy(update={"requests": 300})})


@settings(max_examples=40, deadline=None)
@given(n=st.tuples(st.integers(1, 4), st.integers(0, 4), st.integers(1, 4)),
       tp=st.tuples(*[st.sampled_from([1, 2, 4, 8])] * 3), static=st.booleans())
def test_gpus_are_the_sum_of_tp_times_instances(n, tp, static):
    (n_E, n_P, n_D), (tp_E, tp_P, tp_D) = n, tp
    base = ({"architecture": "epd-static", "n_E": n_E, "n_P": max(n_P, 1), "n_D": n_D}
            if static else {"architecture": "epd", "n_E": n_E, "n_P": n_P, "n_D": n_D, "B": 1,
                            "s": 0.0})
    cfg = parse_config({**base, "tp_E": tp_E, "tp_P": tp_P, "tp_D": tp_D})
    eff_tp_P = cfg.tp_P  # 1 without a remote pool (normalised)
    assert eff_tp_P == (tp_P if cfg.n_P else 1)
    assert cfg.gpus == tp_E * n_E + eff_tp_P * cfg.n_P + tp_D * n_D


def test_the_tp_space_fills_the_budget_and_gives_each_config_once(rtx):
    sp = space_for("epd", rtx.path, rtx.search_space)
    cfgs = list(sp.configs(rtx.cluster.gpus))
    assert cfgs and all(c.gpus == rtx.cluster.gpus for c in cfgs)
    keys = [tuple(sorted(c.model_dump().items())) for c in cfgs]
    assert len(keys) == len(set(keys))
    assert any(c.n_P == 0 for c in cfgs), "configs without a remote pool were lost"


def test_tp_one_is_refused_where_the_model_needs_groups(rtx):
    ev = Evaluation(rtx)
    one = parse_config({"architecture": "epd", "n_E": 2, "n_P": 2, "n_D": 4, "B": 1, "s": 0.5})
    with pytest.raises(InputError, match="tp_E.*does not fit one GPU") as e:
        ev.check(one, "c.yaml")
    assert "2, 4, 8" in e.value.fix
    with pytest.raises(InputError, match="search_space"):
        ev.check_space(space_for("epd", None, None))  # the shipped space is tp 1 only


def test_the_engine_refuses_tp_groups_naming_the_pool(rtx):
    cfg = parse_config({"architecture": "epd", "n_E": 2, "tp_E": 2, "n_P": 0, "n_D": 2,
                        "tp_D": 2, "B": 1, "s": 0.0})
    real = make_evaluator("real", rtx)
    with pytest.raises(InputError, match="tp_E") as e:
        real.check(cfg)
    assert "--evaluator sim" in e.value.fix


@settings(max_examples=6, deadline=None)
@given(pick=st.integers(0, 10_000), load=st.floats(0.3, 1.2))
def test_tp_pools_simulate_deterministically_and_completely(rtx, pick, load):
    ev = Evaluation(rtx)
    cfgs = list(space_for("epd", rtx.path, rtx.search_space).configs(rtx.cluster.gpus))
    cfg = cfgs[pick % len(cfgs)]
    rate = load * ev.start_rate(cfg)
    runs = []
    for _ in range(2):
        sim = ev.simulator(cfg)
        sim.stop_rule = None
        runs.append(sim.run(ev.requests, rate))
    a, b = runs
    assert a.completed + a.rejected == len(ev.requests)
    assert a.ttft.tobytes() == b.ttft.tobytes() and a.tpot.tobytes() == b.tpot.tobytes()
    assert all(0.0 <= u <= 1.0 + 1e-9 for u in a.utilisation.values())


def test_wider_decode_groups_hold_more_kv_and_decode_faster(rtx):
    """tp_D 4 instead of 2 (same GPUs for decode: one instance of 4 vs two of 2): per
    instance, the profile's TP-4 variant holds more KV tokens and steps faster."""
    from hastune.sim.epd import PoolTiming

    ev = Evaluation(rtx)
    two = parse_config({"architecture": "epd", "n_E": 2, "tp_E": 2, "n_P": 0, "n_D": 2,
                        "tp_D": 2, "B": 1, "s": 0.0})
    four = two.model_copy(update={"n_D": 1, "tp_D": 4})
    t2, t4 = PoolTiming.of(ev.profile, two), PoolTiming.of(ev.profile, four)
    assert t4.decode_kv_tokens > t2.decode_kv_tokens
    assert t4.decode.step(8, 8 * 1000) < t2.decode.step(8, 8 * 1000)
    assert t2.kv_local[1] == 2 and t4.kv_local[1] == 2  # min(tp_E, tp_D) links
