"""The `padg` simulator (EcoServe, hastune/archs/padg.py): `simulator` (the model and its
entry point), `run` (one run's state and handlers), `state` (instances and macro-instances),
`scaling` (mitosis), `paged` (KV on demand)."""

from hastune.sim.padg.simulator import PaDGSimulator

__all__ = ["PaDGSimulator"]
