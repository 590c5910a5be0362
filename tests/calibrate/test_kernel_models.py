"""Kernel predictors fitted on a subset of the measured tables, checked on held-out rows."""

from __future__ import annotations

import numpy as np
import pytest

from hastune.calibrate.kernels import AllReduceModel, KernelModel, abs_pct_error
from hastune.calibrate.tables import load_hardware, load_table

SUBSET_ROWS = 2000  # fit on a few thousand rows per table: fast, still ≤ 10% held out


def _subset(table, rows: int):
    keep = np.zeros(len(table), dtype=bool)
    keep[np.linspace(0, len(table) - 1, min(rows, len(table))).astype(int)] = True
    return table.subset(keep)


def test_holdout_is_seeded_disjoint_and_a_fifth(calibration):
    table = load_table(calibration, "a100_sxm", "gemm")
    mask = table.holdout_mask()
    assert mask.sum() == round(0.2 * len(table))
    assert np.array_equal(mask, table.holdout_mask())                  # deterministic
    assert not np.array_equal(mask, table.holdout_mask(seed=1))        # seeded
    fit, held = table.split()
    assert len(fit) + len(held) == len(table)
    both = {tuple(r) for r in fit.shapes} & {tuple(r) for r in held.shapes}
    assert not both                                  # duplicates merged: no shape on both sides
    assert len(np.unique(table.shapes, axis=0)) == len(table)


@pytest.mark.parametrize("kind", ["gemm", "context_attention", "generation_attention"])
def test_fit_on_a_subset_predicts_held_out_rows(calibration, kind):
    table = load_table(calibration, "a100_sxm", kind)
    fit, held = table.split()
    model = KernelModel.fit(_subset(fit, SUBSET_ROWS), load_hardware(calibration, "a100_sxm"))
    err = abs_pct_error(model.predict(held.shapes), held.latency_s)
    assert np.median(err) <= 10.0, (kind, np.median(err))
    base = abs_pct_error(model.baseline(held.shapes), held.latency_s)
    assert np.median(err) < np.median(base)      # the table correction earns its place
    c, m = model.efficiency
    assert 0.05 < c < 1.5 and 0.05 < m < 1.5     # efficiencies near the nominal specs


def test_unmeasured_shapes_extrapolate_smoothly(calibration):
    table, _ = load_table(calibration, "a100_sxm", "generation_attention").split()
    model = KernelModel.fit(_subset(table, SUBSET_ROWS), load_hardware(calibration, "a100_sxm"))
    # more KV heads than measured (MHA, 52 heads) are folded into the batch: same bytes
    mha = np.array([[1, 52, 52, 128, 4095.0]])
    folded = np.array([[52 / 8, 8, 8, 128, 4095.0]])
    assert model.predict(mha) == pytest.approx(model.predict(folded))
    # longer context than measured: grows with the KV it reads
    steps = np.array([[8, 64, 8, 128, s] for s in (1e5, 2e5, 4e5)])
    t = model.predict(steps)
    assert np.all(np.diff(t) > 0) and t[2] / t[1] == pytest.approx(2.0, rel=0.2)


def test_allreduce_interpolates_the_table(calibration):
    table = load_table(calibration, "a100_sxm", "allreduce")
    ar = AllReduceModel.fit(table)
    for g, s, t in zip(table.col("num_gpus"), table.col("message_size"), table.latency_s):
        assert ar.predict(int(g), s)[0] == pytest.approx(t)
    sizes = np.logspace(5, 10, 30)   # small messages are latency-bound and jitter
    assert np.all(np.diff(ar.predict(8, sizes)) > 0) and ar.predict(1, 1e6)[0] == 0.0
