"""The one exception type the CLI turns into a clear one-line error."""


class ArlError(ValueError):
    """Bad input from a user: an unknown name, an invalid value, a corrupt file."""


class Diverged(ArlError):
    """A run stopped because a loss, a gradient norm or a weight stopped being finite."""
