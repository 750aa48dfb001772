"""arl: a CPU-first laboratory for post-training tool-using agents."""

__version__ = "0.1.0"


def _register_gymnasium() -> None:
    """Register "arl/BugFix-v0" when the optional gymnasium is installed (`pip install arl[gym]`).

    Only the id and an entry-point string are registered: the environment module (and the
    gym's tasks) load on the first `gymnasium.make`, so `import arl` stays cheap.
    """
    try:
        import gymnasium
    except ImportError:
        return
    if "arl/BugFix-v0" not in gymnasium.registry:
        gymnasium.register(
            id="arl/BugFix-v0", entry_point="arl.gym.gymnasium_env:BugFixGymnasiumEnv"
        )


_register_gymnasium()
