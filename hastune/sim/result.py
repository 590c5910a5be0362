"""Re-export: RunResult lives in hastune.runs (shared with the engine, which must not import
the simulator)."""

from hastune.runs import RunResult, latencies  # noqa: F401
