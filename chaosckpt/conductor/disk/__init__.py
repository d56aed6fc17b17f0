"""What a disk holds after a crash, and whether a restarted job can load it: crash model, sweep, audit."""
