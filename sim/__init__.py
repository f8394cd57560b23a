"""clustersim: a discrete-event simulator of multi-GPU training clusters."""

__version__ = "0.1.0"
