"""The encode worker's device split (runners/engine/partition.py) on a fake CUDA device: the
SMPartitioner's share becomes SM counts on the driver's grid, contexts are made once per count,
a share change switches contexts, and the CPU / no-green-context paths say what they do."""

from __future__ import annotations

import sys
import types
from contextlib import contextmanager

import pytest

from hastune.policies import SMPartitioner
from runners.device.green import GreenContexts, round_sms, sm_granularity, split_sms
from runners.engine.partition import GREEN, NONE, THREADS, DevicePartition


class FakeStream:
    def __init__(self, sms: int | None):
        self.sms = sms  # None: a stream over the whole device
        self.synced = 0
        self.waited: list = []

    def synchronize(self) -> None:
        self.synced += 1

    def wait_stream(self, other) -> None:
        self.waited.append(other)


class FakeContext:
    def __init__(self, num_sms: int):
        self.num_sms = num_sms
        self.stream = FakeStream(num_sms)

    def Stream(self) -> FakeStream:  # noqa: N802 (torch's name)
        return self.stream


class FakeGreenContext:
    """torch.cuda.green_contexts.GreenContext: records every create."""

    created: list[tuple[int, int]] = []
    fail: str | None = None

    @classmethod
    def create(cls, *, num_sms: int, device_id: int) -> FakeContext:
        if cls.fail:
            raise RuntimeError(cls.fail)
        cls.created.append((num_sms, device_id))
        return FakeContext(num_sms)


class FakeTorch:
    """What DevicePartition and GreenContexts touch of torch, for a GPU of `sms` SMs; records
    the streams work was put on (thread-unsafe: the tests run one thread)."""

    __version__ = "fake"

    def __init__(self, sms: int = 132, major: int = 9):
        self.current: FakeStream = FakeStream(None)
        self.entered: list[FakeStream] = []
        self.whole_made = 0
        props = types.SimpleNamespace(multi_processor_count=sms, major=major)
        torch = self

        class Cuda:
            @staticmethod
            def get_device_properties(spec):
                return props

            @staticmethod
            def current_stream(device=None):
                return torch.current

            @staticmethod
            @contextmanager
            def stream(s):
                prev, torch.current = torch.current, s
                torch.entered.append(s)
                try:
                    yield
                finally:
                    torch.current = prev

            @staticmethod
            def Stream(device=None):  # noqa: N802
                torch.whole_made += 1
                return FakeStream(None)

        self.cuda = Cuda

    @staticmethod
    def device(spec):
        return types.SimpleNamespace(index=int(spec.split(":")[1]) if ":" in spec else None)


@pytest.fixture
def green_module(monkeypatch):
    """A torch.cuda.green_contexts with SUPPORTED = True and the fake factory."""
    FakeGreenContext.created = []
    FakeGreenContext.fail = None
    mod = types.ModuleType("torch.cuda.green_contexts")
    mod.SUPPORTED = True
    mod.GreenContext = FakeGreenContext
    pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "torch.cuda.green_contexts", mod)
    return mod


def _green_partition(torch, partitioner):
    part = DevicePartition.open(torch, "cuda:1", 1, partitioner)
    assert part.kind == GREEN and not part.why
    return part


# -- SM counts ---------------------------------------------------------------------------

@pytest.mark.parametrize("sms,major", [(132, 9), (108, 8), (80, 7), (20, 9), (16, 8)])
def test_split_sums_to_at_most_the_gpu_and_stays_on_the_driver_grid(sms, major):
    lo, step = sm_granularity(major)
    last = 0
    for i in range(0, 101):
        f = i / 100
        n_e, n_p = split_sms(f, sms, major)
        assert n_e + n_p <= sms
        assert n_e >= lo >= 1 and n_p >= lo
        assert (n_e - lo) % step == 0 and (n_p - lo) % step == 0
        assert n_e >= last  # more share, never fewer SMs
        last = n_e
        # as close to f·SMs as the grid and the room for the prefill allow
        if lo <= f * sms <= sms - lo - step:
            assert abs(n_e - f * sms) <= step / 2 + 1e-9
    assert split_sms(1.0, sms, major)[1] == lo  # the prefill keeps one group
    assert split_sms(0.0, sms, major)[0] == lo


def test_split_of_an_h200():
    assert split_sms(0.2, 132, 9) == (24, 104)   # 26.4 → 24; 108 left → 104 on the grid
    assert split_sms(0.75, 132, 9) == (96, 32)   # 99 → 96; 36 left → 32
    assert split_sms(0.3, 108, 8) == (32, 76)    # A100: 32.4 → 32, 76 left (step 2)
    assert round_sms(13.2, 132, 9) == 16         # measure.py's share 0.1 on an H200
    with pytest.raises(ValueError):
        split_sms(0.5, 12, 9)                    # no room for two groups of 8


# -- green contexts ----------------------------------------------------------------------

def test_the_partitioner_share_sets_the_encode_and_prefill_contexts(green_module):
    torch = FakeTorch(132, 9)
    part = _green_partition(torch, SMPartitioner(None))  # the seed table: b=1 → 0.20
    assert FakeGreenContext.created == [(8, 1)]          # the probe, on device 1
    with part.encoding(1):
        assert torch.current.sms == 24                   # encode runs on 24 SMs
        with part.prefilling():                          # a local prefill meanwhile
            assert torch.current.sms == 104              # gets the rest
    assert torch.current.sms is None                     # back on the caller's stream
    enc = next(s for s in torch.entered if s.sms == 24)
    assert enc.synced == 1 and enc.waited                # waits for its inputs, then drains
    with part.prefilling():                              # encoder idle: the whole device
        assert torch.current.sms is None and torch.current in torch.entered
    assert torch.whole_made == 1
    r = part.report()
    assert r["sm_split"] == "green contexts" and r["sms"] == 132
    assert r["shares"] == {"1": {"encode_share": 0.2, "encode_sms": 24, "prefill_sms": 104}}
    assert (r["encodes"], r["local_prefills_split"], r["local_prefills_whole"]) == (1, 1, 1)


def test_contexts_are_made_once_per_sm_count_and_a_share_change_switches(green_module):
    torch = FakeTorch(132, 9)
    part = _green_partition(torch, SMPartitioner(None))
    for _ in range(3):
        with part.encoding(1), part.prefilling():
            pass
    made = sorted(n for n, _ in FakeGreenContext.created)
    assert made == [8, 24, 104]                          # not one per encode
    with part.encoding(8):                               # seed table: b=8 → 0.75
        assert torch.current.sms == 96
        with part.prefilling():
            assert torch.current.sms == 32
    with part.encoding(1):                               # and back, from the cache
        assert torch.current.sms == 24
    assert sorted(n for n, _ in FakeGreenContext.created) == [8, 24, 32, 96, 104]
    assert part.report()["contexts_made"] == [8, 24, 32, 96, 104]
    assert part.green.context(24) is part.green.context(24)
    assert len(FakeGreenContext.created) == 5
    assert set(part.report()["shares"]) == {"1", "8"}


def test_a_profile_curve_drives_the_share(green_module):
    # rel. latency 3× at 10% of the SMs, 1.5× at 30%, 1.1× at 60%: budget 0.2 → f = 0.525
    curve = [(0.1, 3.0), (0.3, 1.5), (0.6, 1.1), (1.0, 1.0)]
    torch = FakeTorch(132, 9)
    part = _green_partition(torch, SMPartitioner(lambda b: curve, budget=0.2))
    with part.encoding(4):
        assert torch.current.sms == 72                   # 0.525 · 132 = 69.3 → 72
        with part.prefilling():
            assert torch.current.sms == 56               # 60 left → 56
    assert part.report()["shares"]["4"]["encode_share"] == pytest.approx(0.525)


def test_an_exception_in_the_encode_clears_the_busy_state(green_module):
    torch = FakeTorch(132, 9)
    part = _green_partition(torch, SMPartitioner(None))
    with pytest.raises(KeyError), part.encoding(2):
        raise KeyError("boom")
    with part.prefilling():
        assert torch.current.sms is None                 # not stuck on the split


# -- the other paths -----------------------------------------------------------------------

def test_cuda_without_green_contexts_runs_unsplit_and_says_so(green_module):
    green_module.SUPPORTED = False
    torch = FakeTorch(132, 9)
    part = DevicePartition.open(torch, "cuda", 1, SMPartitioner(None))
    assert part.kind == NONE and "without green-context support" in part.why
    with part.encoding(1), part.prefilling():
        assert torch.current.sms is None
    assert torch.entered == [] and FakeGreenContext.created == []
    r = part.report()
    assert r["sm_split"] == "none" and "shares" not in r and r["encodes"] == 1


def test_a_driver_that_refuses_green_contexts_falls_back_to_none(green_module):
    FakeGreenContext.fail = "cuda driver too old to use green context!"
    part = DevicePartition.open(FakeTorch(), "cuda:0", 1, SMPartitioner(None))
    assert part.kind == NONE and "driver too old" in part.report()["why"]


def test_a_torch_whose_green_contexts_have_no_streams_falls_back_to_none(green_module):
    class Old(FakeContext):  # older torch: make_current / pop_current only
        Stream = None

    green_module.GreenContext = types.SimpleNamespace(
        create=lambda *, num_sms, device_id: Old(num_sms))
    part = DevicePartition.open(FakeTorch(), "cuda", 1, SMPartitioner(None))
    assert part.kind == NONE and "unavailable" in part.why


def test_too_few_sms_for_two_groups_falls_back_to_none(green_module):
    part = DevicePartition.open(FakeTorch(sms=12, major=9), "cuda", 1, SMPartitioner(None))
    assert part.kind == NONE and "two groups" in part.why


def test_cpu_keeps_the_thread_split(green_module):
    torch = FakeTorch()
    part = DevicePartition.open(torch, "cpu", 3, SMPartitioner(None))
    assert part.kind == THREADS
    with part.encoding(4), part.prefilling():
        pass
    assert torch.entered == [] and FakeGreenContext.created == []
    assert part.report() == {"sm_split": "threads", "encode_threads": 3, "prefill_threads": 3,
                             "encodes": 1, "local_prefills_split": 0,
                             "local_prefills_whole": 1}


def test_epd_static_has_no_local_prefill_and_no_split(green_module):
    part = DevicePartition.open(FakeTorch(), "cuda", 1, None, local_prefill=False)
    assert part.kind == NONE and FakeGreenContext.created == []  # not even probed
    assert "static baseline" in part.report()["why"]
    cpu = DevicePartition.open(FakeTorch(), "cpu", 2, None, local_prefill=False)
    assert cpu.report()["prefill_threads"] == 0


def test_real_torch_on_this_machine_has_no_green_split():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine: benchmarks/gpu_sm_split.py checks it")
    g, why = GreenContexts.probe(torch, "cuda")
    assert g is None and why
