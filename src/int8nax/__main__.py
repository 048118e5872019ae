"""`python -m int8nax ...`: the `int8nax` command (int8nax.commands.cli)."""

import sys

from .commands.cli import main

sys.exit(main())
