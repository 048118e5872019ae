"""int8nax's commands: the `int8nax` command line (cli) and one module per subcommand (compare,
selftest, site, gate, soak) with their helpers, and the asv launcher the gate runs
(asv_persistent).

The top layer: it draws on the measuring layer (int8nax.bench) and the library; neither imports
it. `python -m int8nax` runs cli.main.
"""
