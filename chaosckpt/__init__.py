"""chaosckpt: break a PyTorch training job the way production does, resume it, score the recovery.

This module is imported inside the user's job by the agent, possibly by another
interpreter than the one chaosckpt is installed in: it must import nothing.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``chaosckpt.run`` and ``chaosckpt.Trial``, imported on first use so that importing chaosckpt stays free."""
    if name == "run":
        from chaosckpt.conductor.api import run

        return run
    if name == "Trial":
        from chaosckpt.conductor.result import Trial

        return Trial
    raise AttributeError(f"module 'chaosckpt' has no attribute {name!r}")
