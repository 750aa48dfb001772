"""arl: a CPU-first laboratory for post-training tool-using agents."""

__version__ = "0.1.0"
