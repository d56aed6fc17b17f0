"""The names that mark a checkpoint's files, kept apart from the readers that need torch, so a trial that
reads no checkpoint imports none."""

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt", ".tar", ".safetensors")
"""Files that must load; others are judged when their first bytes are a checkpoint format's."""
DCP_METADATA = ".metadata"
"""A torch.distributed.checkpoint folder's metadata file, written last: the folder is complete once it is there."""
DCP_SHARD_SUFFIX = ".distcp"
"""The ending of a DCP folder's data shards."""
