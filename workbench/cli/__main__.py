"""`python -m workbench.cli ...`: the same as `kvwb ...`."""

from workbench.cli.main import main

raise SystemExit(main())
