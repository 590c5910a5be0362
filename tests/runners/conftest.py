"""Fixtures for the model tests: torch on one thread (the machine is shared), a tiny model."""

from __future__ import annotations

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (skipped without one)")


@pytest.fixture(scope="session")
def torch():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


@pytest.fixture(scope="session")
def tiny(torch):
    """ref-tiny with small KV blocks, so short sequences cross block boundaries."""
    from runners.model.config import get_config
    from runners.model.reference import ReferenceModel

    return ReferenceModel(get_config("ref-tiny", kv_block=4, kv_tokens=4096))


@pytest.fixture(scope="session")
def cuda(torch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    return torch.device("cuda")
