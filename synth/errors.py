"""Errors that reach the user as one line on stderr and a documented exit code.

Exit codes (docs/cli.md): 0 done, 1 the answer is no (invalid schedule, infeasible
instance, nothing found within limits), 2 bad input, 3 an internal error (a bug in
synth: something synth made fails its own checks).
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


REPORT = "a bug in synth: please report it with the command line and its input files"


class InternalError(SynthError):
    """Something synth made fails its own checks (a transformed schedule its verifier,
    an export its runtime's simulator): exit code 3, never bad input, never dropped."""

    exit_code = 3

    def __init__(self, message: str):
        super().__init__(f"internal error: {message} ({REPORT})")
