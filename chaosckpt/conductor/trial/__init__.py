"""One trial: a scenario applied once to a job, as a pipeline of named steps.

``plan`` (how far each run goes: the horizon) -> ``reference`` (the uninterrupted run the trial is
judged against) -> ``plan.place`` (the fault's save among the reference's) -> ``arm`` (the fault spec
and the faulted sandbox) -> ``faulted`` (the run the fault stops) -> ``aftermath`` (what a power loss
leaves on disk) -> ``resume`` (the job restarted the way the user restarts it) -> ``scoring`` (the
verdict, all ranks included); ``runner`` strings them together and writes the headline; ``crashpoints``
and ``survivor`` are the two other endings (a sweep of every crash point, a job that carried on past
its fault); ``shared`` replaces the faulted step in a suite whose kills, power losses and sweeps of one
save share one run.
"""

from chaosckpt.conductor.trial.options import Interrupted, Stop, TrialOptions
from chaosckpt.conductor.trial.runner import TrialRunner, run_trial

__all__ = ["Interrupted", "Stop", "TrialOptions", "TrialRunner", "run_trial"]
