"""Argument types of the console script's sub-commands: a bad value stops argparse with one line that
says what the value must be (``argument --port: 99999 is out of range: a TCP port is 1 .. 65535``),
never an internal name (argparse prints a type function's ``__name__`` when it raises ``ValueError``:
"invalid _positive value"), never a traceback from deeper down."""

import argparse


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def at_least_one(text: str) -> int:
    """A whole number of 1 or more (sizes, counts)."""
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is too small: it must be at least 1")
    return value


def port(text: str) -> int:
    """A TCP port a server can listen on."""
    value = _whole(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is out of range: a TCP port is 1 .. 65535")
    return value


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def positive_seconds(text: str) -> float:
    """A time limit in seconds, above 0."""
    if not _number(text, "a number of seconds") > 0:  # NaN included
        raise argparse.ArgumentTypeError(f"{text} is too small: it must be above 0 seconds")
    return float(text)


def fraction(text: str) -> float:
    """A share of GPU memory: above 0, at most 1."""
    if not 0 < _number(text, "a number") <= 1:  # NaN included
        raise argparse.ArgumentTypeError(f"{text} is out of range: it must be above 0 and at most 1")
    return float(text)


def one_of(*choices: str):
    """A type for one of ``choices`` (for comma-separated lists, where argparse's ``choices`` cannot check)."""
    def check(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(choices)}")
        return text
    return check
