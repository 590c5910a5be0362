"""`hastune profile --device cuda` (skipped without a GPU; the `cuda` marker lives in this
folder's conftest)."""

from __future__ import annotations

import pytest
import yaml

from tests.calibrate.test_profile_cli import hastune


@pytest.mark.cuda
def test_profile_on_cuda_measures_sm_shares(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    out = tmp_path / "gpu.yaml"
    res = hastune("profile", "--model", "ref-tiny", "--device", "cuda", "--quick", "--out", out,
                  "--json")
    assert res.returncode == 0, res.stderr
    data = yaml.safe_load(out.read_text())
    assert data["memory"]["gpu_bytes"] == torch.cuda.get_device_properties(0).total_memory
    from torch.cuda.green_contexts import SUPPORTED

    assert data["fit"]["measured"]["share"] == ("green contexts" if SUPPORTED else "none")
    assert hastune("validate", out).returncode == 0
