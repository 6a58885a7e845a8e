"""`python -m masrl.cli ARGS`: the `masrl` command (what several-process runs start on each machine)."""

import sys

from masrl.cli import main

sys.exit(main())
