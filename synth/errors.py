"""Errors that reach the user as one line on stderr and a documented exit code.

Exit codes (docs/cli.md): 0 done, 1 the answer is no (invalid schedule, infeasible
instance, nothing found within limits), 2 bad input.
"""


class SynthError(Exception):
    """Base class: the message is the one line the user sees."""

    exit_code = 2


class BadInput(SynthError):
    """Unknown names, malformed files, out-of-range options: exit code 2."""

    exit_code = 2


class NoAnswer(SynthError):
    """A well-formed question whose answer is no: exit code 1."""

    exit_code = 1
