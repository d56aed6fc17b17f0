#!/bin/sh
# Starts preempt_job.py as a child of the shell (no exec): a SIGTERM sent to this script ends the shell, and the
# trainer never gets it.
python3 "$(dirname "$0")/preempt_job.py" "$@"
