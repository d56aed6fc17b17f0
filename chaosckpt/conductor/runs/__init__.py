"""One run of a job: its process tree, sandbox and confinement, locks, logs, events and the reference cache."""
