"""arl: a CPU-first laboratory for post-training tool-using agents."""

__version__ = "0.1.0"


GYMNASIUM_IDS = {
    "arl/BugFix-v0": "arl.gym.gymnasium_env:BugFixGymnasiumEnv",
    "arl/CodeFix-v0": "arl.codefix.gymnasium_env:CodeFixGymnasiumEnv",
}


def _register_gymnasium() -> None:
    """Register "arl/BugFix-v0" and "arl/CodeFix-v0" when the optional gymnasium is installed
    (`pip install arl[gym]`).

    Only the ids and entry-point strings are registered: the environment modules (and their
    tasks) load on the first `gymnasium.make`, so `import arl` stays cheap.
    """
    try:
        import gymnasium
    except ImportError:
        return
    for env_id, entry_point in GYMNASIUM_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point)


_register_gymnasium()
