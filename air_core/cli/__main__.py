"""`python -m air_core.cli`: the `air-data` command."""

from . import main

raise SystemExit(main())
