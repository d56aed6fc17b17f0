"""The agent: the only chaosckpt code that runs inside the user's job.

It uses the standard library and torch only (numpy when the job already imported
it), because the job's interpreter need not be the one chaosckpt is installed in.
It never changes what the job computes unless a fault is armed.
"""
