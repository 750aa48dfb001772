"""arl: a CPU-first laboratory for post-training tool-using agents."""

__version__ = "0.1.0"


def _gymnasium_ids() -> dict[str, str]:
    """arl.env.gymnasium_ids(), the module found by name at run time (as arl.env.REGISTRY finds
    the environments): the package's face imports nothing above it."""
    import importlib

    return importlib.import_module("arl.env").gymnasium_ids(strict=False)


def _register_gymnasium() -> None:
    """Register every environment's declared Gymnasium id ("arl/BugFix-v0", "arl/CodeFix-v0",
    an installed package's) when the optional gymnasium is installed (`pip install arl[gym]`).

    Only the ids and entry-point strings are registered (arl.env.gymnasium_ids): the wrappers
    load on the first `gymnasium.make`.
    """
    try:
        import gymnasium
    except ImportError:
        return
    for env_id, entry_point in _gymnasium_ids().items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point)


def __getattr__(name: str):
    """GYMNASIUM_IDS (id -> "module:Class"), derived from the environments' declarations."""
    if name == "GYMNASIUM_IDS":
        return _gymnasium_ids()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_register_gymnasium()
