"""The command line (README "Set up and run"; the contract is in docs/cli.md).

Importing this package registers every command on the `synth` group; each command
imports what it needs only when it runs, so `synth --help` loads no solver, SciPy or
matplotlib.
"""

from synth.cli import (calibrate, compare, export, pictures, plan, run,  # noqa: F401
                       synthesize, topo, verify)
from synth.cli.app import cli, main

__all__ = ["cli", "main"]
