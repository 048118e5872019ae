"""`python -m int8nax ...`: the `int8nax` command (int8nax.cli)."""

import sys

from .cli import main

sys.exit(main())
