"""`hastune gateway CONFIG [--host H --port P]`: the EAServe gateway over vLLM or SGLang."""

from __future__ import annotations

from pathlib import Path

import typer

from hastune.cli.app import app


@app.command()
def gateway(
    config: Path = typer.Argument(..., help="gateway config YAML (docs/deploy.md, "
                                  "\"The hastune gateway\")"),
    host: str | None = typer.Option(None, "--host", help="listen address (default: the "
                                    "config's listen.host)"),
    port: int | None = typer.Option(None, "--port", min=0, max=65535,
                                    help="listen port (default: the config's listen.port)"),
) -> None:
    """Serve an OpenAI-compatible API over a running E/P/D deployment of vLLM or SGLang
    servers, applying EAServe's runtime with the simulator's policies: Poisson-gap
    micro-batches of encodes (at most B), a share s of prefills to the remote pool and the
    rest to the encode GPU's co-resident prefill server, least-in-flight routing, and
    admission that sheds explicitly (429/503). Serves until Ctrl-C.

    Exit codes: 0 stopped; 2 bad input (the config, or aiohttp missing)."""
    from hastune.errors import InputError
    from runners.gateway.config import load_gateway_config

    cfg = load_gateway_config(config)
    try:
        from runners.gateway.server import run
    except ImportError as exc:
        raise InputError(None, "aiohttp", f"the gateway needs aiohttp ({exc})",
                         "pip install 'hastune[gateway]'") from None
    run(cfg, host, port)
