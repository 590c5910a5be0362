"""Calibrated latency models: measured kernel tables → per-layer model → profile YAML."""
