"""Property tests on generated recipes (tests/generated.py). Examples are derandomized so CI
sees the same recipes on every run; HASTUNE_PROPERTY_SEED=random draws new ones locally."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "generated", derandomize=os.environ.get("HASTUNE_PROPERTY_SEED") != "random",
    deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("generated")
