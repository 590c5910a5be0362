"""What the fidelity benchmarks share: the measurements file they read by default (issue 13;
run as `python benchmarks/NAME.py`, which puts this folder on the import path)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CSV = ROOT.parent / "shared" / "calibration" / "e2e" / "silicon_llama31.csv"
