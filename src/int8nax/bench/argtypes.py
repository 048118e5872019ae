"""argparse types the commands share. Each turns one option's text into its value, or raises
argparse.ArgumentTypeError with one line saying what it takes and what came (argparse puts the
option's name in front)."""

from __future__ import annotations

import argparse
import os
import re
import shutil


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


def folder(text: str) -> str:
    """An existing folder the command reads (the path as given)."""
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"expected an existing folder, got {text!r}"
                                         + (", a file" if os.path.exists(text) else ""))
    return text


def output_folder(text: str) -> str:
    """A folder the command writes files into, made where missing (the path as given): not a file,
    and where it does not exist yet, under a folder this user can write into."""
    if not text or (os.path.exists(text) and not os.path.isdir(text)):
        raise argparse.ArgumentTypeError(f"expected a folder to write into, got {text!r}"
                                         + (", a file" if text else ""))
    parent = os.path.abspath(text)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"expected a folder to write into, got {text!r}: {parent!r} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"expected a folder this user can write into, got {text!r}")
    return text


def program(text: str) -> str:
    """A program to run: a name on PATH or a path to an executable file (the text as given)."""
    if not text or shutil.which(text) is None:
        raise argparse.ArgumentTypeError(f"expected a program on PATH or an executable file, got {text!r}")
    return text


def regex(text: str) -> str:
    """A Python regular expression (the text as given, used with re.search)."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"expected a regular expression, got {text!r}: {exc}") from None
    return text


def backend(text: str) -> str:
    """A backend's name or alias (int8nax.backends.canonical), as its canonical name."""
    from .. import backends

    try:
        return backends.canonical(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("backend: ")) from None
