"""Fault kinds: where each fires, how it is armed, what its resume needs and what it finds."""
