"""The serving engine: runs a deployment config (the architectures whose
module names an engine mode: hastune.archs) with a real model.

Local processes per worker (encode + co-resident local prefill, remote prefill, decode), the
shared policies of `hastune.policies` for batching and routing, and a frontend that submits
requests, timestamps their first and last tokens, and fails requests explicitly when a worker
dies. Workers run as local processes or, with `EngineOptions(backend="ray")`, as Ray actors
(backend.py). `Engine` is the entry point; see docs/engine.md and docs/engine-runtime.md.
"""

from __future__ import annotations

from runners.engine.engine import Engine, EngineOptions

__all__ = ["Engine", "EngineOptions"]
