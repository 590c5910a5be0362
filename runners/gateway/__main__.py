"""`python -m runners.gateway CONFIG [--host H] [--port P]`: serve until Ctrl-C."""

from __future__ import annotations

import argparse
import logging
import sys

from hastune.errors import EXIT_INPUT_ERROR, InputError
from runners.gateway.config import load_gateway_config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runners.gateway", description=__doc__)
    ap.add_argument("config", help="gateway config YAML")
    ap.add_argument("--host", default=None, help="listen address (default: the config's)")
    ap.add_argument("--port", type=int, default=None, help="listen port (default: the config's)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        cfg = load_gateway_config(args.config)
    except InputError as exc:
        print(exc.message, file=sys.stderr)
        return EXIT_INPUT_ERROR
    from runners.gateway.server import run

    run(cfg, args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
