"""Where a job keeps its checkpoints, read from the path of one file it saved; shared by the agent (which
writes count toward the open checkpoint) and the conductor (which directories to watch)."""

from __future__ import annotations

import os
import re

_NUMBERED = re.compile(r".+[-_=.]\d+")
"""A folder per checkpoint: a name, a separator, its number (``checkpoint-8``, ``checkpoint_2``, ``step_40``); not
``node1`` or ``rank0``, which are one node's or rank's folder for all its checkpoints."""


def location(path: str) -> str:
    """The directory that holds checkpoints for a file saved at ``path``: its folder, or for a numbered
    per-checkpoint folder (``checkpoint-8/``, ``checkpoint_2/``, ``step_40/``) the folder above it, so that
    the folders the job creates later are watched too."""
    folder = os.path.dirname(path)
    return os.path.dirname(folder) if _NUMBERED.fullmatch(os.path.basename(folder)) else folder
