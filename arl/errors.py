"""The one exception type the CLI turns into a clear one-line error, and optional imports."""

import importlib
from typing import Any


class ArlError(ValueError):
    """Bad input from a user: an unknown name, an invalid value, a corrupt file."""


class Diverged(ArlError):
    """A run stopped because a loss, a gradient norm or a weight stopped being finite."""


def require(module: str, what: str, extra: str = "hf") -> Any:
    """Import an optional dependency, or say in one line which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ArlError(
            f"{what} needs the `{module}` package (pip install 'arl[{extra}]')"
        ) from None
