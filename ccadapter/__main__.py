"""Console entry point. ``ccadapter hook`` must not pay for click and pydantic (it runs for
every job on the controller), so it is dispatched here before anything else is imported."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["hook"]:
        from ccadapter.prep.hook import main as hook

        sys.exit(hook(sys.argv[2:]))
    from ccadapter.cli import main as cli

    cli()


if __name__ == "__main__":
    main()
