from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from hastune.config import load_config
from hastune.evaluators.sim import Evaluation
from hastune.recipe import load_recipe

ROOT = Path(__file__).resolve().parent.parent

# A suite started as a background job of a script (`scripts/test &`) inherits SIGINT ignored,
# and so would every hastune it starts, so the tests that press Ctrl-C on one would see it do
# nothing. With Python's own handler here, the processes the tests start get the default.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Skips that mean "something to install is missing": under CI (CI set, as .ci/run does) they
# fail, so a missing install step cannot hide behind a skip. Skips that mean "not applicable
# here" (this machine has CUDA, root cannot make a file read-only) stay skips.
_MISSING = ("could not import", "calibration data not found", "needs torch", "not installed")


# Tests that run the engine (or a stand-in server) on this machine's cores and judge what
# they measure: scripts/test runs them one at a time after the rest, which run in parallel.
# A prefix of a test's node id.
ENGINE_TESTS = ("tests/engine/", "tests/openai/", "tests/e2e/",
                "tests/test_real_noise.py::test_two_real_runs_agree_within_the_spread",
                "tests/tune/test_recheck.py::test_a_recheck_on_the_engine")


def pytest_configure(config):
    config.addinivalue_line("markers", "engine: runs the engine on this machine's cores "
                            "(scripts/test runs these one at a time, after the rest)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(ENGINE_TESTS):
            item.add_marker(pytest.mark.engine)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and os.environ.get("CI") and call.excinfo is not None:
        reason = str(call.excinfo.value)
        if any(m in reason for m in _MISSING):
            rep.outcome = "failed"
            rep.longrepr = (f"{item.nodeid}: would skip in CI ({reason}); install what it "
                            "needs in the README's install line")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """The same for a whole module skipped at import (`pytest.importorskip` at its top)."""
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and os.environ.get("CI"):
        reason = str(rep.longrepr[-1]) if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        if any(m in reason for m in _MISSING):
            rep.outcome = "failed"
            rep.longrepr = (f"{collector.nodeid}: would skip in CI ({reason}); install what "
                            "it needs in the README's install line")
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
