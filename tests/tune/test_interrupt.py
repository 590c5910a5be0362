"""A Ctrl-C that lands where Python drops it (a weakref callback the garbage collector runs,
as SQLAlchemy's are) still stops a tune: hastune.interrupt records it and the search loop
raises it again before the next evaluation. CI caught the drop: `hastune plan` interrupted
during a gc callback printed "Exception ignored … KeyboardInterrupt" and ran to exit 0."""

from __future__ import annotations

import gc
import os
import signal
import weakref

import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune import interrupt
from hastune.recipe import load_recipe
from hastune.tune.runner import TuneOptions, Tuner, evaluated_trials
from tests.fakes import LookupEvaluator

# the interrupt Python drops is printed as unraisable: that is the case under test
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


class _Obj:
    pass


def _ctrl_c_inside_a_gc_callback() -> None:
    """Deliver SIGINT to this process while a weakref callback runs, as a Ctrl-C that arrives
    while the collector frees an object: the handler runs inside the callback."""
    def cb(_ref) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):  # the handler runs at the next check of the eval loop
            abs(1)

    o = _Obj()
    r = weakref.ref(o, cb)
    del o
    gc.collect()
    assert r() is None


@pytest.fixture
def handler():
    """Python's own SIGINT handler or hastune's, restored afterwards."""
    old = signal.getsignal(signal.SIGINT)
    interrupt.clear()
    yield lambda h: signal.signal(signal.SIGINT, h)
    signal.signal(signal.SIGINT, old)
    interrupt.clear()


def test_pythons_handler_loses_a_ctrl_c_in_a_callback(handler):
    """The control: with Python's handler the interrupt is printed and dropped."""
    handler(signal.default_int_handler)
    _ctrl_c_inside_a_gc_callback()  # returns: nothing was raised here
    interrupt.check()  # and nothing is recorded


def test_hastune_keeps_a_ctrl_c_in_a_callback(handler):
    handler(interrupt._handler)
    _ctrl_c_inside_a_gc_callback()
    assert interrupt.pending()
    with pytest.raises(KeyboardInterrupt):
        interrupt.check()


def test_install_leaves_a_foreign_handler_alone(handler):
    def mine(signum, frame):
        pass

    handler(mine)
    assert not interrupt.install()
    assert signal.getsignal(signal.SIGINT) is mine
    handler(signal.default_int_handler)
    assert interrupt.install()
    assert signal.getsignal(signal.SIGINT) is interrupt._handler


class _Dropping(LookupEvaluator):
    """Evaluates `after` configurations, then a Ctrl-C arrives inside a gc callback during
    the next one, which finishes: the interrupt is swallowed where it landed."""

    def __init__(self, recipe, after: int):
        super().__init__(recipe)
        self.after = after

    def goodput(self, config, *a, **k):
        res = super().goodput(config, *a, **k)
        if len(self.calls) == self.after + 1:
            _ctrl_c_inside_a_gc_callback()
        return res


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(after=st.integers(0, 3), seed=st.integers(0, 1000))
def test_a_swallowed_ctrl_c_stops_the_tune_before_the_next_evaluation(
        small_recipe, tmp_path_factory, handler, after, seed):
    handler(interrupt._handler)
    interrupt.clear()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rec = load_recipe(small_recipe)
    fake = _Dropping(rec, after)
    tuner = Tuner(rec, TuneOptions(trials=8, out=str(tmp_path_factory.mktemp("t")),
                                   storage="memory", seed=seed), evaluator=fake)
    study = tuner.open_study()
    with pytest.raises(KeyboardInterrupt):
        tuner.work(study)
    assert len(fake.calls) == after + 1, "evaluated on after the Ctrl-C"
    # the evaluation the Ctrl-C landed in finished, and is kept with those before it
    assert len(evaluated_trials(study)) == after + 1
