from __future__ import annotations

from pathlib import Path

import pytest

from hastune.calibrate.tables import default_calibration_dir


@pytest.fixture(scope="session")
def calibration() -> Path:
    """The measured kernel tables (hastune/data/calibration); tests that need them skip without."""
    root = default_calibration_dir()
    if not (root / "kernels").is_dir():
        pytest.skip(f"calibration data not found at {root} (set HASTUNE_CALIBRATION)")
    return root
