"""Data the project ships (hastune/data/calibration/, Apache-2.0, from NVIDIA aiconfigurator-core
0.12.0; README.md and the LICENSE files beside the tables):

- `KERNELS`: measured GPU kernel latencies per system (kernels/<system>/*.csv.gz, hardware.yaml),
  what the shipped profiles were fitted on and `hastune profile check` scores them against;
- `E2E`: measured end-to-end runs of real engines (e2e/silicon_*.csv), what `hastune fidelity`
  scores the simulator against and the engine terms were fitted on.
"""

from __future__ import annotations

from pathlib import Path

CALIBRATION = Path(__file__).resolve().parent / "calibration"
KERNELS = CALIBRATION / "kernels"
E2E = CALIBRATION / "e2e"
SILICON_LLAMA31 = E2E / "silicon_llama31.csv"
SILICON_TRAIN = E2E / "silicon_train.csv"
