"""The `ray` backend of the engine (runners/engine/backend.py says what a backend is): one Ray
actor per worker, queues and load counters in a hub actor, mirrored per process."""

from __future__ import annotations

import logging
import os
import pickle
import queue
import threading
import time
from typing import Any

from hastune.errors import InputError

MIRROR_S = 0.005        # how stale a process's copy of the load counters may be
LOCAL_CLUSTER_CPUS = 32  # logical CPUs of a local Ray cluster: every worker of a config fits
LOCAL_OBJECT_STORE = 256 * 1024**2


# -- ray ----------------------------------------------------------------------------------

def init_ray(address: str | None = None) -> None:
    """Connect to the cluster at `address` (or $RAY_ADDRESS), else start a small local one.
    A process that already called `ray.init` keeps its connection."""
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
    if address:
        _reachable(address)
        try:
            ray.init(address=address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError(None, "--ray-address", f"cannot connect to a Ray cluster at "
                             f"{address!r}: {str(exc).splitlines()[0]}", "check the address "
                             "`ray start --head` printed; if the cluster uses token "
                             "authentication, set RAY_AUTH_MODE=token and its token "
                             "(RAY_AUTH_TOKEN, `ray get-auth-token`) here too") from None
        return
    quiet["logging_level"] = logging.ERROR  # not the notice that local clusters use a token
    # a private cluster listens on 127.0.0.1 only (no dashboard): Ray binds to the node's
    # address, the loopback where multi-node clusters are off (a switch its processes read too)
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    if hasattr(ray._private, "ray_constants"):  # read by this process's ray already
        ray._private.ray_constants.ENABLE_RAY_CLUSTER = False
    ray.init(address="local", num_cpus=max(os.cpu_count() or 1, LOCAL_CLUSTER_CPUS),
             object_store_memory=LOCAL_OBJECT_STORE, include_dashboard=False, **quiet)


def _reachable(address: str) -> None:
    """Fail at once on a host:port nobody listens on (ray.init would retry for minutes)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", "local" and the like: ray.init resolves them
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise InputError(None, "--ray-address", f"nothing answers at {address} ({exc})",
                         "start the head with `ray start --head` and pass the address it "
                         "prints (HEAD_IP:6379)") from None


_HUB_CLASS: Any = None
_WORKER_CLASS: Any = None


def _classes() -> tuple[Any, Any]:
    """The actor classes, defined on first use so that ray loads only here."""
    global _HUB_CLASS, _WORKER_CLASS
    if _HUB_CLASS is not None:
        return _HUB_CLASS, _WORKER_CLASS
    import asyncio

    import ray

    @ray.remote(num_cpus=0, max_concurrency=10_000)
    class Hub:
        """The queues and counters of one engine (an asyncio actor)."""

        def __init__(self) -> None:
            self.queues: dict[int, asyncio.Queue] = {}
            self.arrays: dict[int, list] = {}

        def _q(self, qid: int) -> asyncio.Queue:
            q = self.queues.get(qid)
            if q is None:
                q = self.queues[qid] = asyncio.Queue()
            return q

        async def put(self, qid: int, item: Any) -> None:
            self._q(qid).put_nowait(item)

        async def take(self, qid: int, timeout: float) -> list:
            """Everything queued, waiting up to `timeout` for the first item."""
            q = self._q(qid)
            items = []
            if q.empty():
                try:  # a get cancelled by the timeout leaves its item queued
                    items.append(await asyncio.wait_for(q.get(), timeout))
                except asyncio.TimeoutError:
                    return []
            while not q.empty():
                items.append(q.get_nowait())
            return items

        async def new_array(self, aid: int, values: list) -> None:
            self.arrays[aid] = list(values)

        async def add(self, aid: int, i: int, delta: float) -> None:
            self.arrays[aid][i] += delta

        async def set(self, aid: int, i: int, value: Any) -> None:
            self.arrays[aid][i] = value

        async def snapshot(self) -> dict[int, list]:
            return {k: list(v) for k, v in self.arrays.items()}

    @ray.remote(max_restarts=0)
    class Worker:
        """Runs one worker main; the actor's death is the worker's death."""

        def clock(self) -> tuple[str, float]:
            return ray.get_runtime_context().get_node_id(), time.time() - time.monotonic()

        def run(self, target: Any, args: tuple, kwargs: dict) -> int:
            target(*args, **kwargs)
            return 0

    _HUB_CLASS, _WORKER_CLASS = Hub, Worker
    return Hub, Worker


class RayContext:
    """The ray backend: the context's queues, counters and processes live in Ray."""

    def __init__(self, address: str | None = None, cpus: float = 1.0, gpus: float = 0.0):
        init_ray(address)
        import itertools

        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        hub_cls, _ = _classes()
        self.node = ray.get_runtime_context().get_node_id()
        self.epoch = time.time() - time.monotonic()  # this node's monotonic → wall clock
        self.hub = hub_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            self.node, soft=True)).remote()
        self.cpus, self.gpus = cpus, gpus
        self.procs: list[ActorProcess] = []
        self._ids = itertools.count()
        self.closed = False

    def Queue(self, maxsize: int = 0) -> RemoteQueue:  # noqa: N802  (the mp context's names)
        return RemoteQueue(self.hub, next(self._ids))

    def Array(self, typecode: str, size_or_values: Any, lock: bool = True) -> RemoteArray:  # noqa: N802
        import ray

        values = ([0] * size_or_values if isinstance(size_or_values, int)
                  else list(size_or_values))
        aid = next(self._ids)
        ray.get(self.hub.new_array.remote(aid, values))
        return RemoteArray(self.hub, aid, typecode, len(values))

    def Process(self, target: Any = None, args: tuple = (), kwargs: dict | None = None,  # noqa: N802
                name: str | None = None, daemon: bool | None = None) -> ActorProcess:
        p = ActorProcess(self, target, tuple(args), dict(kwargs or {}), name)
        self.procs.append(p)
        self._fits(len(self.procs))
        return p

    def _fits(self, n: int) -> None:
        """Refuse at once a worker the whole cluster could never place (Ray would leave it
        pending until the engine's start timeout)."""
        import ray

        have = ray.cluster_resources()
        for res, each in (("CPU", self.cpus), ("GPU", self.gpus)):
            if each and n * each > have.get(res, 0.0) + 1e-9:
                self.close()  # the workers started so far
                raise InputError(None, "--ray-address", f"the Ray cluster has "
                                 f"{have.get(res, 0.0):g} {res}s in all; {n} workers with "
                                 f"{each:g} each do not fit", "add nodes, start them with "
                                 f"more --num-{res.lower()}s, or use a smaller config")

    def close(self) -> None:
        """Kill every worker actor and the hub (the Ray connection stays for the next
        engine of this process)."""
        import ray

        if self.closed:
            return
        self.closed = True
        for p in self.procs:
            p.kill()
        _MIRRORS.pop(self.hub._actor_id.hex(), None)
        try:
            ray.kill(self.hub, no_restart=True)
        except Exception:  # noqa: BLE001  (ray already shut down)
            pass


class RemoteQueue:
    """A queue in the hub. `put` is a fire-and-forget actor call; the consumer's first `get`
    starts a pump thread that moves everything queued in the hub into a local queue."""

    def __init__(self, hub: Any, qid: int):
        self.hub, self.qid = hub, qid
        self._local: queue.Queue | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"hub": self.hub, "qid": self.qid}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["hub"], state["qid"])  # type: ignore[misc]

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        # pickled here: the hub keeps opaque bytes (it never imports torch to hold a tensor)
        self.hub.put.remote(self.qid, pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))

    def put_nowait(self, item: Any) -> None:
        self.put(item)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        return self._consumer().get(block, timeout)

    def get_nowait(self) -> Any:
        return self.get(False)

    def _consumer(self) -> queue.Queue:
        if self._local is None:
            with self._lock:
                if self._local is None:
                    q: queue.Queue = queue.Queue()
                    threading.Thread(target=self._pump, args=(q,), daemon=True,
                                     name=f"hastune-pump-{self.qid}").start()
                    self._local = q
        return self._local

    def _pump(self, q: queue.Queue) -> None:
        import ray

        while True:
            try:
                items = ray.get(self.hub.take.remote(self.qid, 1.0))
            except Exception:  # noqa: BLE001  (the hub is gone: the engine stopped)
                return
            for item in items:
                q.put(pickle.loads(item))


class _Mirror:
    """One process's copy of an engine's counters."""

    def __init__(self, hub: Any):
        self.hub = hub
        self.lock = threading.RLock()
        self.data: dict[int, list] = {}
        self.t = -1e18

    def _fresh(self, aid: int) -> dict[int, list]:
        import ray

        now = time.monotonic()
        if now - self.t > MIRROR_S or aid not in self.data:
            self.data = ray.get(self.hub.snapshot.remote())
            self.t = now
        return self.data

    def read(self, aid: int, i: int) -> Any:
        with self.lock:
            return self._fresh(aid)[aid][i]

    def write(self, aid: int, i: int, value: Any, counter: bool) -> None:
        with self.lock:
            data = self.data if aid in self.data else self._fresh(aid)
            if counter:  # `a[i] -= x` read a[i] just before, under the lock: send the delta
                self.hub.add.remote(aid, i, value - data[aid][i])
            else:
                self.hub.set.remote(aid, i, value)
            data[aid][i] = value


_MIRRORS: dict[str, _Mirror] = {}
_MIRRORS_LOCK = threading.Lock()


class RemoteArray:
    """An `mp.Array` look-alike over the hub: reads come from this process's mirror; writes of
    a 'd' array are deltas (counters), of other typecodes plain sets (flags)."""

    def __init__(self, hub: Any, aid: int, typecode: str, n: int):
        self.hub, self.aid, self.typecode, self.n = hub, aid, typecode, n

    def _mirror(self) -> _Mirror:
        key = self.hub._actor_id.hex()
        m = _MIRRORS.get(key)
        if m is None:
            with _MIRRORS_LOCK:
                m = _MIRRORS.setdefault(key, _Mirror(self.hub))
        return m

    def get_lock(self) -> threading.RLock:
        return self._mirror().lock

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return self._mirror().read(self.aid, i)

    def __setitem__(self, i: int, value: Any) -> None:
        self._mirror().write(self.aid, i, value, counter=self.typecode == "d")

    def __iter__(self) -> Any:
        return iter([self[i] for i in range(self.n)])


class ActorProcess:
    """An `mp.Process` look-alike: one Ray actor running one worker main."""

    def __init__(self, ctx: RayContext, target: Any, args: tuple, kwargs: dict,
                 name: str | None):
        self.ctx, self.target, self.args, self.kwargs = ctx, target, args, kwargs
        self.name = name
        self.exitcode: int | None = None
        self.reason: str | None = None
        self._actor: Any = None
        self._ref: Any = None
        self._clock: Any = None
        self._shift: float | None = None

    def start(self) -> None:
        _, worker_cls = _classes()
        opts: dict[str, Any] = {"num_cpus": self.ctx.cpus}
        if self.ctx.gpus:
            opts["num_gpus"] = self.ctx.gpus
        self._actor = worker_cls.options(**opts).remote()
        self._clock = self._actor.clock.remote()  # runs before `run`: tasks keep their order
        self._ref = self._actor.run.remote(self.target, self.args, self.kwargs)

    def is_alive(self) -> bool:
        import ray

        if self._ref is None or self.exitcode is not None:
            return False
        ready, _ = ray.wait([self._ref], timeout=0, fetch_local=False)
        if not ready:
            return True
        try:
            ray.get(self._ref, timeout=0)
            self.exitcode = 0
        except ray.exceptions.RayActorError as exc:
            self.exitcode, self.reason = -9, str(exc).strip().splitlines()[0]
        except Exception as exc:  # noqa: BLE001  (the worker main raised)
            self.exitcode, self.reason = 1, str(exc).strip().splitlines()[-1]
        if self.exitcode:
            logging.getLogger(__name__).warning("ray worker %s: %s", self.name, self.reason)
        return False

    def join(self, timeout: float | None = None) -> None:
        import ray

        if self._ref is not None:
            ray.wait([self._ref], timeout=timeout, fetch_local=False)
            self.is_alive()

    def kill(self) -> None:
        import ray

        if self._actor is not None:
            try:
                ray.kill(self._actor, no_restart=True)
            except Exception:  # noqa: BLE001  (already gone)
                pass

    terminate = kill

    @property
    def clock_shift(self) -> float:
        """Add to this worker's `time.monotonic()` stamps to put them on the frontend's clock:
        0 on the frontend's node (one monotonic clock per machine), else the difference of
        the two machines' monotonic→wall offsets (their wall clocks kept in sync by NTP)."""
        if self._shift is None:
            import ray

            try:
                node, epoch = ray.get(self._clock, timeout=5)
                self._shift = 0.0 if node == self.ctx.node else epoch - self.ctx.epoch
            except Exception:  # noqa: BLE001  (dead before it answered)
                self._shift = 0.0
        return self._shift
