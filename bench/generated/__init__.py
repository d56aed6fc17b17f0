"""Generated training jobs and an independent judge of their truth (issue 31).

``jobgen``: the dimensions of how real trainers save, rotate, resume and draw data, a seeded pairwise covering array
over them, and the job script each row composes. ``judge``: each job's truth established by experiment (strace fault
injection), sharing no code with chaosckpt. ``agreement``: chaosckpt run on the same job and fault, compared with the
judge, printed per dimension value.
"""
