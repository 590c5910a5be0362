from __future__ import annotations

from pathlib import Path

import pytest

from hastune.config import load_config
from hastune.evaluate import Evaluation
from hastune.recipe import load_recipe

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def audio_recipe():
    return load_recipe(EXAMPLES / "audio-ultravox-8xa100.yaml")


@pytest.fixture(scope="session")
def image_recipe():
    return load_recipe(EXAMPLES / "image-llava-8xa100.yaml")


@pytest.fixture(scope="session")
def epd_config():
    return load_config(EXAMPLES / "configs" / "epd-2-2-4.yaml")


@pytest.fixture(scope="session")
def static_config():
    return load_config(EXAMPLES / "configs" / "epd-static-2-2-4.yaml")


@pytest.fixture(scope="session")
def audio_eval(audio_recipe):
    return Evaluation(audio_recipe, requests=600)
