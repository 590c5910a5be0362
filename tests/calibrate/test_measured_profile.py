"""Measured profiles (`hastune profile`): fitting rows to the linear forms, share curves, the
profile they make. Torch-free: rows are synthetic, drawn from known coefficients."""

from __future__ import annotations

import numpy as np
import pytest

from hastune.calibrate.fit_measured import fit_stage, profile_dict, share_curves, split
from hastune.calibrate.measure import QUICK, ModelInfo, Plan, Row, RowCache, shapes
from hastune.profile import Profile

TRUE = {"encode": (2e-3, 1e-4, 5e-5, 2e-8), "prefill": (3e-3, 1.5e-4, 1e-8),
        "decode": (4e-3, 2e-4, 1e-7)}


def synthetic_rows(noise: float = 0.02, seed: int = 0) -> list[Row]:
    rng = np.random.default_rng(seed)
    sizes = {"image": [64, 128, 224, 448], "audio": [1, 2, 4, 8]}

    def tokens(mod, s):
        return (int((s // 16) ** 2), int((s // 32) ** 2)) if mod == "image" else \
            (int(50 * s), int(13 * s))

    rows = []
    for sh in shapes(Plan(), sizes, tokens, [0.5]):
        p = dict(sh.params)
        if sh.stage.startswith("encode"):
            n, x = p["batch"], p["tokens"]
            f = np.array([1, n, n * x, n * x * x])
            t = f @ TRUE["encode"]
        elif sh.stage.startswith("prefill"):
            n, L = p["batch"], p["length"]
            t = np.array([1, n * L, n * L * L]) @ TRUE["prefill"]
        else:
            n, c = p["batch"], p["context"]
            p["mean_context"] = c + 5
            t = np.array([1, n, n * (c + 5)]) @ TRUE["decode"]
        if "share" in p:  # half the threads: 1.7× slower
            t *= 1.7 if p["share"] < 1 else 1.0
        t *= 1 + noise * rng.standard_normal()
        rows.append(Row(sh.stage, sh.key, p, float(t), [float(t)]))
    return rows


INFO = ModelInfo("ref-test", 1.6e7, 1.0e7, 4096.0, 1024.0, ("image", "audio"))


def make(rows, **kw):
    return profile_dict(INFO, rows, Plan(), gpu="cpu", device="cpu: test, 2 threads",
                        torch_version="2.13.0", command="hastune profile ...",
                        share_kind="threads", gpu_bytes=2 * 2**30, **kw)


def test_fit_recovers_known_coefficients_and_reports_held_out_error():
    rows = [r for r in synthetic_rows(noise=0.0) if r.stage == "decode"]
    lf, held = fit_stage("decode", rows, 0.25, 0)
    assert np.allclose(lf.coef, TRUE["decode"], rtol=1e-3)
    assert held is not None and held["points"] == round(0.25 * len(rows))
    assert held["median_pct"] < 0.1


def test_split_is_seeded_and_disjoint():
    rows = [r for r in synthetic_rows() if r.stage == "prefill"]
    a_fit, a_held = split(rows, 0.25, 0)
    b_fit, b_held = split(list(reversed(rows)), 0.25, 0)
    assert [r.key for r in a_held] == [r.key for r in b_held]  # order of measuring is moot
    assert not {r.key for r in a_fit} & {r.key for r in a_held}
    assert len(a_fit) + len(a_held) == len(rows)
    assert split(rows[:3], 0.25, 0)[1] == []  # too few rows to hold any out


def test_share_curves_are_monotone_relative_latencies():
    enc, pre = share_curves(synthetic_rows(noise=0.05))
    assert set(enc) == set(Plan().share_batches)
    for pts in [*enc.values(), pre]:
        assert pts[-1] == [1.0, 1.0] and pts[0][0] == 0.5
        assert 1.5 < pts[0][1] < 1.9
        rels = [r for _, r in pts]
        assert rels == sorted(rels, reverse=True) and min(rels) >= 1.0


def test_measured_profile_validates_and_records_its_errors():
    data = make(synthetic_rows())
    prof = Profile.model_validate(data)
    assert prof.fit.calibration is None and prof.fit.measured.share == "threads"
    assert set(prof.fit.error) == {"encode", "prefill", "decode"}
    for stage, stat in prof.fit.error.items():
        assert stat.median_pct < 5, (stage, stat)
        assert prof.fit.measured.fitted_error[stage].points > stat.points
    assert prof.memory.kv_bytes_per_token == 4096 and prof.memory.kv_capacity_tokens() > 1e5
    assert prof.encode.curve_for(3) == prof.encode.sm_curve[4]
    assert prof.prefill.max_batch_tokens == Plan().prefill_token_cap
    assert prof.decode.max_batch == max(Plan().decode_batches)


def test_without_share_rows_the_curves_are_left_to_the_defaults():
    rows = [r for r in synthetic_rows() if "@share" not in r.stage]
    prof = Profile.model_validate(make(rows))
    assert prof.encode.sm_curve is None
    assert prof.prefill.sm_curve == Profile.model_fields["prefill"].annotation.model_fields[
        "sm_curve"].default


def test_a_fit_record_names_one_source():
    data = make(synthetic_rows())
    data["fit"]["calibration"] = "a100_sxm"
    with pytest.raises(ValueError, match="either calibration"):
        Profile.model_validate(data)


def test_row_cache_resumes_only_the_same_measurement(tmp_path):
    path = tmp_path / "p.rows.json"
    fp = {"model": "m", "plan": 1}
    c = RowCache(path, fp)
    c.put(Row("decode", "decode:b1:c16", {"batch": 1, "context": 16}, 0.01, [0.01]))
    assert RowCache(path, fp).rows.keys() == {"decode:b1:c16"}
    assert RowCache(path, fp, fresh=True).rows == {}
    other = RowCache(path, {"model": "m", "plan": 2})
    assert other.rows == {} and other.stale


def test_quick_plan_is_small():
    sizes = {"image": [64, 128], "audio": [1, 2]}
    todo = shapes(QUICK, sizes, lambda m, s: (16, 4), [])
    assert len(todo) <= 20 and not any("@share" in s.stage for s in todo)
    assert QUICK.kv_tokens >= 4 * (64 + QUICK.warmup + QUICK.repeats)
