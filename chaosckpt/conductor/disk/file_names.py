"""The names that mark a checkpoint's files, kept apart from the readers that need torch, so a trial that
reads no checkpoint imports none."""

import os
import re

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt", ".tar", ".safetensors")
"""Files that must load; others are judged when their first bytes are a checkpoint format's."""
DCP_METADATA = ".metadata"
"""A torch.distributed.checkpoint folder's metadata file, written last: the folder is complete once it is there."""
DCP_SHARD_SUFFIX = ".distcp"
"""The ending of a DCP folder's data shards."""

TEMPORARY = re.compile(r"(\.(tmp|temp|partial|part)(\.[^.]*)?|~)$|^tmp|\.tmp\.", re.IGNORECASE)
"""Names a save writes before its rename: ``last.pt.tmp``, ``step_40.pt.tmp.1234``, ``ckpt.partial``, ``tmpab12cd``
(``tempfile``'s), ``last.pt~``."""


def is_temporary(path: str) -> bool:
    """Whether a file's name marks it as a save's temporary file, to be renamed over the checkpoint once whole."""
    return bool(TEMPORARY.search(os.path.basename(path)))
