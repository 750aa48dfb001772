"""transformers, loaded on demand and kept quiet: a leaf every hf module may import."""

from __future__ import annotations

from arl.errors import require


def require_transformers():
    """The transformers module, or a one-line error naming the extra to install."""
    return require("transformers", "--model")


def quiet(tf) -> None:
    """No progress bars or advice from transformers: arl prints its own progress."""
    tf.utils.logging.set_verbosity_error()
    tf.utils.logging.disable_progress_bar()
