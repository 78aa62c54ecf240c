"""Entry point of `python -m ops`; the commands live in ops.cli."""

from ops.cli import main

raise SystemExit(main())
