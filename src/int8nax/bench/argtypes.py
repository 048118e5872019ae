"""argparse types the commands share. Each turns one option's text into its value, or raises
argparse.ArgumentTypeError with one line saying what it takes and what came (argparse puts the
option's name in front)."""

from __future__ import annotations

import argparse
import os


def positive(kind):
    """`kind` (int or float) of a finite value above 0 (an infinite count, duration or limit is
    no setting: the code that waits on one overflows)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value
    return parse


def count(least: int, most: int | None = None):
    """A whole number from `least` (to `most`, where given)."""

    def parse(text: str) -> int:
        value = int(text) if text.strip().isdigit() else None
        if value is None or value < least or (most is not None and value > most):
            want = f">= {least}" if most is None else f"from {least} to {most}"
            raise argparse.ArgumentTypeError(f"expected a whole number {want}, got {text!r}")
        return value
    return parse


def seconds(text: str) -> float:
    """A finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def sizes(text: str) -> tuple[int, ...]:
    """Comma-separated positive whole numbers."""
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive whole numbers, got {text!r}")
    return tuple(int(p) for p in parts)


def output_file(text: str) -> str:
    """A file the command writes when it is done (the path as given). Checked here, so that a
    path that cannot be written fails at once, not after minutes of measuring: not a folder,
    in a folder that exists, writable by this user."""
    folder = os.path.dirname(text) or os.curdir
    if not text or os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"expected a file to write, got {text!r}" + (", a folder" if text else ""))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"expected a file in an existing folder, got {text!r}: no folder {folder!r}")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(text) and not os.access(text, os.W_OK)):
        raise argparse.ArgumentTypeError(f"expected a file this user can write, got {text!r}")
    return text


def backend(text: str) -> str:
    """A backend's name or alias (int8nax.backends.canonical), as its canonical name."""
    from .. import backends

    try:
        return backends.canonical(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("backend: ")) from None
