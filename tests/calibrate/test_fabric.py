"""A rack-scale system's collectives past its measured GPU counts (hastune.calibrate.aic_fabric).
On generated tables: the system's own rows are kept as they are, a count is added only from
the twin, above the system's largest and within its NVLink domain, at the twin's sizes, and
each added time is the twin's times the system / twin ratio at the largest count both measured
(exactly that ratio where their sizes meet); on generated system files the twin is the 8-GPU
board of the same generation and NVLink bandwidth, and no other. On aiconfigurator-core's own
tables (the `kernels` extra, installed in CI: no skip) GB200 gains B200's 8-GPU rows, B200 and
the Hopper boards gain nothing, and a GB200 profile of DeepSeek offers TP 8 and an 8-rank
attention-DP group, its record saying where those collectives come from. Past every table's
counts (16 and 32 GPUs of a rack's NVLink domain) a collective is the time on the most GPUs
measured times the bus factor (n − 1) / n over theirs: on generated tables exactly that, and a
GB200 DeepSeek profile offers TP 16 and attention-DP groups of 16 and 32 ranks, an 8-GPU
board nothing past 8."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.calibrate.aic import AicSource
from hastune.calibrate.aic_fabric import COMM_KINDS, STRETCH, extend, rack, stretch, twin

REPO = Path(__file__).resolve().parents[2]


def _table(counts, sizes, base, grow):
    """Rows (num_gpus, size) with times base·(1 + size·grow·n) — positive, rising in size."""
    rows, lat = [], []
    for n in counts:
        for m in sizes:
            rows.append((float(n), float(m)))
            lat.append(base * n * (1.0 + m * grow * n))
    return np.array(rows), np.array(lat)


sizes_st = st.lists(st.integers(1, 1 << 28), min_size=2, max_size=12, unique=True).map(sorted)


@settings(max_examples=120, deadline=None)
@given(own_sizes=sizes_st, twin_sizes=sizes_st,
       own_base=st.floats(1e-6, 1e-4), twin_base=st.floats(1e-6, 1e-4),
       grow=st.floats(1e-9, 1e-6), most=st.sampled_from([4, 8, 16, 72]),
       twin_counts=st.sampled_from([(2, 4, 8), (2, 4, 8, 16), (4, 8), (2, 8)]))
def test_added_counts_are_the_twins_scaled_by_the_shared_counts_ratio(
        own_sizes, twin_sizes, own_base, twin_base, grow, most, twin_counts):
    shapes, lat = _table((2, 4), own_sizes, own_base, grow)
    tshapes, tlat = _table(twin_counts, twin_sizes, twin_base, grow * 1.3)
    out, olat, added = extend(shapes, lat, tshapes, tlat, most)
    common = sorted({2, 4} & set(twin_counts))
    want = [n for n in twin_counts if 4 < n <= most] if common else []
    assert added == want
    assert np.array_equal(out[:len(shapes)], shapes) and np.array_equal(olat[:len(lat)], lat)
    assert len(out) == len(shapes) + len(want) * len(twin_sizes)
    assert (olat > 0).all() and np.isfinite(olat).all()
    if not want:
        return
    k = common[-1]
    own_k = dict(zip(shapes[shapes[:, 0] == k, 1], lat[shapes[:, 0] == k]))
    twin_k = dict(zip(tshapes[tshapes[:, 0] == k, 1], tlat[tshapes[:, 0] == k]))
    for n in want:
        sel = out[:, 0] == n
        assert sorted(out[sel, 1]) == sorted(twin_sizes)   # the twin's sizes
        tn = dict(zip(tshapes[tshapes[:, 0] == n, 1], tlat[tshapes[:, 0] == n]))
        got = dict(zip(out[sel, 1], olat[sel]))
        for m in set(own_k) & set(twin_k):   # where both measured a size: exactly the ratio
            assert got[m] == pytest.approx(tn[m] * own_k[m] / twin_k[m], rel=1e-9)
        # everywhere: within the range of the ratios the two tables give
        ratios = np.array([own_k[m] / np.exp(np.interp(np.log(m), np.log(sorted(twin_k)),
                                                        np.log([twin_k[s] for s in
                                                                sorted(twin_k)])))
                           for m in own_k])
        r = np.array([got[m] / tn[m] for m in got])
        assert (r >= ratios.min() * (1 - 1e-9)).all() and (r <= ratios.max() * (1 + 1e-9)).all()


def test_nothing_is_added_without_a_shared_count():
    shapes, lat = _table((2, 4), (64, 4096), 1e-5, 1e-8)
    tshapes, tlat = _table((8,), (64, 4096), 1e-5, 1e-8)
    out, olat, added = extend(shapes, lat, tshapes, tlat, 72)
    assert added == [] and out is shapes and olat is lat


@settings(max_examples=120, deadline=None)
@given(sizes=sizes_st, base=st.floats(1e-6, 1e-4), grow=st.floats(1e-9, 1e-6),
       counts=st.sampled_from([(2,), (2, 4), (2, 4, 8), (4, 8, 16), (2, 4, 8, 16, 32)]),
       most=st.sampled_from([0, 4, 8, 16, 36, 72]))
def test_counts_past_every_table_take_the_bus_factor(sizes, base, grow, counts, most):
    shapes, lat = _table(counts, sizes, base, grow)
    out, olat, added = stretch(shapes, lat, most)
    k = max(counts)
    assert added == [n for n in STRETCH if k < n <= most]       # above k, within the rack
    assert np.array_equal(out[:len(shapes)], shapes) and np.array_equal(olat[:len(lat)], lat)
    assert len(out) == len(shapes) + len(added) * len(sizes)
    at_k = dict(zip(shapes[shapes[:, 0] == k, 1], lat[shapes[:, 0] == k]))
    for n in added:
        sel = out[:, 0] == n
        got = dict(zip(out[sel, 1], olat[sel]))
        assert sorted(got) == sorted(at_k)                        # k's sizes, each
        for m, t in got.items():                                  # k's time × the bus factor
            assert t == pytest.approx(at_k[m] * (n - 1) / n * k / (k - 1), rel=1e-12)
            assert at_k[m] < t < at_k[m] * 2 * k / (k - 1)        # slower, never twice as slow


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 400), built=st.integers(0, 300), fraction=st.floats(0.0, 0.9),
       seed=st.integers(0, 2**31 - 1))
def test_built_rows_are_never_held_out_and_move_no_measured_one(n, built, fraction, seed):
    from hastune.calibrate.tables import KernelTable

    rows = np.column_stack([np.arange(n + built, dtype=float), np.ones(n + built)])
    lat = np.linspace(1e-5, 1e-3, n + built)
    alone = KernelTable("gb200", "allreduce", ("num_gpus", "message_size"), rows[:n], lat[:n])
    grown = KernelTable("gb200", "allreduce", ("num_gpus", "message_size"), rows, lat, n)
    held = grown.holdout_mask(fraction, seed)
    assert not held[n:].any()                                   # a built row: never
    assert np.array_equal(held[:n], alone.holdout_mask(fraction, seed))
    fit, out = grown.split(fraction, seed)
    assert fit.measured == n - int(held.sum()) and out.measured == int(held.sum())
    assert len(fit) + len(out) == n + built and len(out) == int(held.sum())


@pytest.mark.parametrize("per_node, most, inter, want", [
    (4, 72, 900e9, 72), (4, 72, 100e9, 0), (8, 8, 900e9, 0), (8, None, 900e9, 0),
    (4, 36, 900e9, 36)])
def test_a_rack_is_an_nvlink_domain_past_the_node(per_node, most, inter, want):
    doc = {"node": {"num_gpus_per_node": per_node, "intra_node_bw": 900e9,
                    "inter_node_bw": inter}}
    if most:
        doc["node"]["num_gpus_per_rack"] = most
    assert rack(doc) == want


def _system(sm=100, per_node=8, rack=None, intra=900e9, inter=None):
    node = {"num_gpus_per_node": per_node, "intra_node_bw": intra,
            "inter_node_bw": inter if inter is not None else (intra if rack else 100e9)}
    if rack:
        node["num_gpus_per_rack"] = rack
    return {"gpu": {"sm_version": sm}, "node": node}


@settings(max_examples=80, deadline=None)
@given(sm=st.sampled_from([90, 100, 103]), other_sm=st.sampled_from([90, 100, 103]),
       bw=st.sampled_from([450e9, 900e9]), other_bw=st.sampled_from([450e9, 900e9]),
       rack=st.sampled_from([None, 4, 36, 72]), inter_same=st.booleans(),
       board_gpus=st.sampled_from([4, 8]))
def test_the_twin_is_the_larger_board_of_the_same_generation_and_bandwidth(
        sm, other_sm, bw, other_bw, rack, inter_same, board_gpus):
    files = {"rack": _system(sm, 4, rack, bw, bw if inter_same else 100e9),
             "board": _system(other_sm, board_gpus, None, other_bw)}
    want = ("board" if rack and rack > 4 and inter_same and sm == other_sm and bw == other_bw
            and board_gpus > 4 else None)
    assert twin(files, "rack") == want
    assert twin(files, "board") is None            # a board has no rack to extend over
    assert twin(files, "missing") is None


# --- aiconfigurator-core's own tables ---------------------------------------------------------

@pytest.mark.parametrize("engine", ["trtllm", "sglang", "vllm"])
def test_gb200_gains_b200s_eight_gpu_rows_and_no_board_changes(engine):
    src = AicSource(engine)
    assert src.fabric_twin("gb200") == "b200_sxm" and src.fabric_twin("gb300") == "b300_sxm"
    for board in ("b200_sxm", "h200_sxm", "h100_sxm", "b300_sxm"):
        assert src.fabric_twin(board) is None and src.derived_collectives(board) is None
    for kind in COMM_KINDS:
        if not src.has_table("gb200", kind):
            continue
        t, b = src.table("gb200", kind), src.table("b200_sxm", kind)
        counts = sorted({int(n) for n in t.col("num_gpus")})
        assert counts == sorted({2, 4, *STRETCH}
                                | {int(n) for n in b.col("num_gpus") if 4 < n <= 72})
        assert 8 in counts and 64 not in counts
        for n in STRETCH:   # past every table: the 8-GPU time × the bus factor, size by size
            for m in set(t.col("message_size")):
                t8, tn = _at(t, 8, m), _at(t, n, m)
                if len(t8):
                    assert tn[0] == pytest.approx(t8[0] * (n - 1) / n * 8 / 7)
        # where GB200 and B200 measured one size at 4 GPUs, 8 GPUs keep that ratio
        for m in set(t.col("message_size")) & set(b.col("message_size")):
            t4, b4, b8, t8 = (_at(t, 4, m), _at(b, 4, m), _at(b, 8, m), _at(t, 8, m))
            if len(t4) and len(b4) and len(b8):
                assert t8[0] == pytest.approx(b8[0] * t4[0] / b4[0])


def _at(tab, gpus, size):
    sel = (tab.col("num_gpus") == gpus) & (tab.col("message_size") == size)
    return tab.latency_s[sel]


@cache
def _gb200(engine: str, weights: str):
    from hastune.calibrate.aic_profiles import aic_source, gpu_spec
    from hastune.calibrate.device import build_device

    src = aic_source(weights, engine)
    return build_device(src, gpu_spec("gb200", src))


@pytest.mark.parametrize("engine, weights", [("trtllm", "nvfp4"), ("sglang", "fp8")])
def test_a_gb200_deepseek_profile_offers_the_racks_tp_and_dp_groups(engine, weights):
    from hastune.calibrate.build import _kernel_source, dp_degrees, tp_degrees
    from hastune.models import load_model

    arch = load_model(REPO / "examples" / "models" / "deepseek-v3")
    dev = _gb200(engine, weights)
    assert {8, 16} <= set(tp_degrees(arch, dev)) and 32 not in tp_degrees(arch, dev)
    assert {8, 16, 32} <= set(dp_degrees(arch, dev)) and 64 not in dp_degrees(arch, dev)
    rec = _kernel_source(dev)
    assert rec is not None and "b200_sxm" in rec["collectives"]
    assert "16 and 32 GPUs" in rec["collectives"]
    assert rec["tp_built"] == "16"         # what a TP 16 config's caveat reads (hastune.caveats)
    assert src_counts(engine, weights) == [16, 32]


def src_counts(engine: str, weights: str) -> list[int]:
    from hastune.calibrate.aic_profiles import aic_source

    return aic_source(weights, engine).built_counts("gb200", "allreduce")


@pytest.mark.parametrize("board", ["b200_sxm", "h200_sxm", "h100_sxm"])
def test_a_board_offers_nothing_past_its_node(board):
    from hastune.calibrate.aic_profiles import aic_source, gpu_spec
    from hastune.calibrate.build import _kernel_source, dp_degrees, tp_degrees
    from hastune.calibrate.device import build_device
    from hastune.models import load_model

    arch = load_model(REPO / "examples" / "models" / "deepseek-v3")
    src = aic_source("fp8", "trtllm")
    dev = build_device(src, gpu_spec(board, src))
    assert max(tp_degrees(arch, dev), default=0) <= 8
    assert max(dp_degrees(arch, dev), default=0) <= 8
    assert src.built_counts(board, "allreduce") == []
    assert "tp_built" not in (_kernel_source(dev) or {})
