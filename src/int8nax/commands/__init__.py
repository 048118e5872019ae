"""int8nax's commands: the `int8nax` command line (cli) and one module per subcommand (compare,
selftest, gate, soak, warm) with their helpers, or a package where it has several parts (site/),
the gate's calibration (gate_calibrate/, `python -m int8nax.commands.gate_calibrate`) and the asv
launcher the gate runs (asv_persistent).

The top layer: it draws on the measuring layer (int8nax.bench) and the library; neither imports
it. `python -m int8nax` runs cli.main.
"""
