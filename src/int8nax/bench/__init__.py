"""int8nax's measuring layer: the problems, checks, timing, contenders and peers that every
measurement (the asv suite, `int8nax compare`, `int8nax selftest`) shares.

It sits above the library (api, backends, nn) and below the commands and benchmarks/: the
library never imports it.
"""
