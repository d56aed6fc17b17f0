"""chaosckpt: break a PyTorch training job the way production does, resume it, score the recovery.

This module is imported inside the user's job by the agent, possibly by another
interpreter than the one chaosckpt is installed in: it must import nothing.
"""

__version__ = "0.1.0"

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; type checkers take it as true
if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports these on first use
    from chaosckpt.conductor.api import run as run
    from chaosckpt.conductor.results.result import Trial as Trial

__all__ = ["run", "Trial", "__version__"]


def __getattr__(name: str) -> object:
    """``chaosckpt.run`` and ``chaosckpt.Trial``, imported on first use so that importing chaosckpt stays free."""
    if name == "run":
        from chaosckpt.conductor.api import run

        return run
    if name == "Trial":
        from chaosckpt.conductor.results.result import Trial

        return Trial
    raise AttributeError(f"module 'chaosckpt' has no attribute {name!r}")
