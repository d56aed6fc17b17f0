"""chaosckpt: break a PyTorch training job the way production does, resume it, score the recovery.

This module is imported inside the user's job by the agent, possibly by another
interpreter than the one chaosckpt is installed in: it must import nothing.
"""

__version__ = "0.1.0"
