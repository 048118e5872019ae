"""python -m int8nax.commands.gate_calibrate: the calibration's command line."""

from . import main

raise SystemExit(main())
