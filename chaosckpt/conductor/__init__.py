"""The conductor: the ``chaosckpt`` process that runs, faults, resumes and scores a job.

It never imports the user's code; it reads events, files and exit statuses.
"""
