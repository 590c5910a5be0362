"""The `nodg` simulator (vLLM-like replicas, hastune/archs/nodg.py): `simulator` (the model
and its entry point), `run` (one run's state, loop and handlers), `plan` (what each replica's
next iterations carry), `paged` (KV on demand with preemption)."""

from hastune.sim.nodg.simulator import NoDGSimulator

__all__ = ["NoDGSimulator"]
