from __future__ import annotations

from pathlib import Path

import pytest

from hastune.config import load_config
from hastune.evaluate import Evaluation
from hastune.recipe import load_recipe

ROOT = Path(__file__).resolve().parent.parent
# Short probes for tests whose property holds for any evaluator settings (pruning's soundness,
# the search loop): the defaults' long steady-state windows cost seconds per goodput.
QUICK = {"min_span": 5.0, "min_requests": 300, "extend": 2.0}


def quick(recipe):
    """`recipe` with short probes (QUICK)."""
    return recipe.model_copy(update={"evaluator": recipe.evaluator.model_copy(update=QUICK)})
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
