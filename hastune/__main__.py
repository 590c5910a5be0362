"""Run the CLI as `python -m hastune`."""

from hastune.cli import main

main()
