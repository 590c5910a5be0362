"""What the frontend and the workers send each other (plain tuples and dataclasses, no
callables: the queues carry data only). Times are `time.monotonic()`, one clock for every
process on the machine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STOP = "stop"


@dataclass
class Job:
    """A request as the workers see it."""

    rid: int
    prompt: list[int]
    max_tokens: int
    modality: str | None = None      # None: text only
    payload_size: float | None = None
    arrival: float = 0.0             # when it entered the engine
    embeddings: Any = None           # set by the encoder
    stamps: dict[str, float] = field(default_factory=dict)


# events to the frontend: (kind, rid, worker, time, extra)
EV_ENCODED = "encoded"        # extra: name of the prefill worker it went to
EV_FIRST = "first"            # extra: name of the decode worker it goes to
EV_DONE = "done"              # extra: tokens generated
EV_FAILED = "failed"          # extra: reason
EV_READY = "ready"            # a worker finished loading its model
EV_STEP = "step"              # decode step timing sample: extra = (model_s, overhead_s, batch)
EV_STEPS = "steps"            # a worker's step timings: extra = (rows, final)
                              # (runners/engine/steplog.py; final: answers a FLUSH)
EV_SPLIT = "split"            # encode worker: how it splits the device with its local prefill
                              # (extra: runners/engine/partition.py DevicePartition.report())
# replica modes (runners/engine/replica.py)
# windowed mode: a prefill batch ran, extra = (rids, seconds, tokens); a prefill window
# closed, extra = (opened, steps, rids)
EV_PREFILLED = "prefilled"
EV_WINDOW = "window"
