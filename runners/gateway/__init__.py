"""The hastune gateway: an OpenAI-compatible streaming HTTP front that runs EAServe's runtime
(Poisson-gap micro-batching of encodes, deficit routing of a share s of prefills to the remote
pool, least-in-flight routing, admission with explicit shedding) over real vLLM or SGLang
servers, with the policy objects the simulator uses (hastune.policies). It replaces the
engines' example proxies. `python -m runners.gateway CONFIG` or `hastune gateway CONFIG`;
docs/deploy.md, "The hastune gateway".

Only config.py is imported here: aiohttp loads with the server (runners.gateway.server)."""

from __future__ import annotations

from runners.gateway.config import GatewayConfig, load_gateway_config, parse_gateway_config

__all__ = ["GatewayConfig", "load_gateway_config", "parse_gateway_config"]
