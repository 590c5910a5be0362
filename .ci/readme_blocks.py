"""Print the shell lines of one of the README's two commands, so that .ci/run runs exactly what
the README tells a user to run (the two cannot drift).

    python3 .ci/readme_blocks.py install   # the block under "## Install and run (fresh machine)"
    python3 .ci/readme_blocks.py test      # the block under "## Run the tests"

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SECTIONS = {"install": "## Install and run (fresh machine)", "test": "## Run the tests"}


def block(readme: str, heading: str) -> str:
    """The first ```bash block after `heading` (and before the next '## ' heading)."""
    start = readme.index(heading + "\n")
    rest = readme[start + len(heading) + 1:]
    nxt = re.search(r"^## ", rest, flags=re.M)
    section = rest[: nxt.start()] if nxt else rest
    m = re.search(r"^```bash\n(.*?)^```$", section, flags=re.M | re.S)
    if m is None:
        raise SystemExit(f"README.md: no ```bash block under {heading!r}")
    return m.group(1)


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in SECTIONS:
        raise SystemExit(f"usage: {sys.argv[0]} {'|'.join(SECTIONS)}")
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    sys.stdout.write(block(readme, SECTIONS[sys.argv[1]]))


if __name__ == "__main__":
    main()
