"""synth: synthesize collective communication algorithms for GPU clusters."""

__version__ = "0.1.0"
