"""The verdict-truth table: every bundled example and test job x every scenario, expected against got.

    python bench/verdict_table.py                       # every row, serially (about 20-30 minutes)
    python bench/verdict_table.py --only lightning      # the rows whose job or scenario contains a word
    python bench/verdict_table.py --markdown table.md   # also write the Markdown table to a file
    python bench/verdict_table.py --frameworks          # the framework table: HF Trainer, Accelerate, DCP

The sweep rows (``SWEEP_ROWS``, run with ``--sweep``, shown as ``power-loss (sweep)``) judge a job at every crash
point of its save; ``--only sweep`` runs just them.

Each row runs the real ``chaosckpt run`` on a copy of the job in a scratch folder. The expected
verdict and cause are what the job really does under the fault, established by reading the job
(and, for the Lightning jobs, by hand from Lightning's own log lines). The cause is the trial's
outcome, and for a failure the finding that explains it first (see ``cause``). Exit 1 when any
row is wrong; the table says which.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from chaosckpt.conductor.disk.sweep import first_failed

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = ("kill9-mid-save", "enospc", "power-loss", "eval-left-on", "rank-epoch-skew", "preemption")
NODE_SCENARIOS = ("node-power-loss", "node-loss")
"""Scenarios of multi-node jobs (``--nnodes``): judged by tests/test_nodes.py on nodes of their own, not here."""

ASYNC_PAUSE = ("the saver thread finishes each checkpoint before the training's next step (the main thread "
               "pauses after the hand-over): the checkpoint ends at that step, and the power loss after save 2 "
               "comes there, not at the exit (async_thread_job.truth.md)")
ONLY = " only"
"""Ends an expected cause that must be the trial's one explaining finding (``last-good, steps-replayed only``): every
explaining finding is compared, as with causes joined by `` + ``, so a second, wrong cause fails the row."""
EVAL_SAME = "no dropout or batch norm: eval mode computes the same"
AS_KILLED = ("no SIGTERM handler: the signal's default action ends the job in save 2, where kill9-mid-save's SIGKILL "
             "lands, so it meets the kill's verdict (with no-emergency-save: the steps since its last checkpoint lost)")
"""Why preemption gives a job that does not handle SIGTERM its kill9-mid-save verdict."""
PREEMPT_ATOMIC = ("the periodic saves are atomic (temporary name, fsync, rename, folder fsync): the previous last.pt "
                  "survives (preempt_job.truth.md)")
"""Why eval-left-on passes a job whose modules compute the same in both modes."""

EXPLAINING = ("background-error-unobserved", "exit-with-save-in-flight", "emergency-save-torn", "exit-0-after-preemption",
              "resume-chose-incomplete",
              "resume-chose-dcp-without-metadata", "resume-chose-older", "rotation-before-complete",
              "resume-exited", "acknowledged-checkpoint-lost", "move-became-copy", "torn-checkpoint", "in-place-save",
              "resumed-other-weights", "ranks-disagree", "steps-skipped", "steps-replayed", "optimizer-not-restored",
              "scheduler-not-restored", "buffers-not-restored", "scaler-not-restored", "eval-mode-in-training",
              "rng-captured-early", "rng-drawn-after-restore",
              "rng-not-restored", "epoch-order-replayed", "epoch-order-differs", "step-count-differs", "sampler-overlap",
              "sampler-missing", "resume-hung")
"""Finding kinds that say why a trial failed, most telling first: the first one present is its cause."""


@dataclass(frozen=True)
class Job:
    name: str
    path: str
    args: Tuple[str, ...]
    nproc: int = 1
    beside: Tuple[str, ...] = ()
    """Files copied beside the job under their own names (the trainer a launcher script starts)."""


JOBS = {
    "robust_train": Job("examples/robust_train.py", "examples/robust_train.py", ("--epochs", "3")),
    "naive_train": Job("examples/naive_train.py", "examples/naive_train.py", ("--epochs", "3")),
    "lightning_train": Job("examples/lightning_train.py", "examples/lightning_train.py", ("--epochs", "3")),
    "train_job": Job("tests/jobs/train_job.py", "tests/jobs/train_job.py", ("--epochs", "3")),
    "lightning_job": Job("tests/jobs/lightning_job.py", "tests/jobs/lightning_job.py", ("--epochs", "3")),
    "lightning_async_job": Job("tests/jobs/lightning_async_job.py", "tests/jobs/lightning_async_job.py",
                               ("--epochs", "3")),
    "ddp_job": Job("tests/jobs/ddp_job.py (2 ranks)", "tests/jobs/ddp_job.py", (), nproc=2),
    "place_job": Job("tests/jobs/place_job.py", "tests/jobs/place_job.py", ()),
    "writers_job": Job("tests/jobs/writers_job.py", "tests/jobs/writers_job.py", ()),
    "membuf_job": Job("tests/jobs/membuf_job.py", "tests/jobs/membuf_job.py", ()),
    "membuf_robust": Job("tests/jobs/membuf_job.py --robust", "tests/jobs/membuf_job.py", ("--robust",)),
    "membuf_fallback": Job("tests/jobs/membuf_job.py --fallback", "tests/jobs/membuf_job.py", ("--fallback",)),
    "bestcopy_job": Job("tests/jobs/bestcopy_job.py", "tests/jobs/bestcopy_job.py", ()),
    "ema_job": Job("tests/jobs/ema_job.py", "tests/jobs/ema_job.py", ()),
    "ema_job_model": Job("tests/jobs/ema_job.py --load model", "tests/jobs/ema_job.py", ("--load", "model")),
    "ema_module_job": Job("tests/jobs/ema_module_job.py", "tests/jobs/ema_module_job.py", ()),
    "midepoch_job": Job("tests/jobs/midepoch_job.py", "tests/jobs/midepoch_job.py", ()),
    "midepoch_replay": Job("tests/jobs/midepoch_job.py --resume epoch-start", "tests/jobs/midepoch_job.py",
                           ("--resume", "epoch-start")),
    "midepoch_replay_rng": Job("tests/jobs/midepoch_job.py --resume epoch-start --dropout", "tests/jobs/midepoch_job.py",
                               ("--resume", "epoch-start", "--dropout")),
    "midepoch_position_rng": Job("tests/jobs/midepoch_job.py --resume position --dropout",
                                 "tests/jobs/midepoch_job.py", ("--resume", "position", "--dropout")),
    "midepoch_position": Job("tests/jobs/midepoch_job.py --resume position", "tests/jobs/midepoch_job.py",
                             ("--resume", "position")),
    "preload_job": Job("tests/jobs/preload_job.py", "tests/jobs/preload_job.py", ()),
    "cwd_ckpt_job": Job("tests/jobs/cwd_ckpt_job.py", "tests/jobs/cwd_ckpt_job.py", ()),
    "link_job": Job("tests/jobs/link_job.py", "tests/jobs/link_job.py", ()),
    "safetensors_job": Job("tests/jobs/safetensors_job.py", "tests/jobs/safetensors_job.py", ()),
    "async_thread_job": Job("tests/jobs/async_thread_job.py", "tests/jobs/async_thread_job.py", ()),
    "async_thread_pause": Job("tests/jobs/async_thread_job.py --pause-after-handoff", "tests/jobs/async_thread_job.py",
                              ("--pause-after-handoff",)),
    "async_thread_daemon": Job("tests/jobs/async_thread_job.py --daemon", "tests/jobs/async_thread_job.py",
                               ("--daemon",)),
    "async_thread_native": Job("tests/jobs/async_thread_job.py --daemon --serialize-in-thread --keep-saving",
                               "tests/jobs/async_thread_job.py", ("--daemon", "--serialize-in-thread", "--keep-saving")),
    "scheduler_job": Job("tests/jobs/scheduler_job.py", "tests/jobs/scheduler_job.py", ()),
    "own_path_job": Job("tests/jobs/own_path_job.py", "tests/jobs/own_path_job.py", ()),
    "scheduler_saved": Job("tests/jobs/scheduler_job.py --save-scheduler", "tests/jobs/scheduler_job.py",
                           ("--save-scheduler",)),
    "counter_job": Job("tests/jobs/counter_job.py", "tests/jobs/counter_job.py", ()),
    "counter_robust": Job("tests/jobs/counter_job.py --robust", "tests/jobs/counter_job.py", ("--robust",)),
    "epoch_skip_job": Job("tests/jobs/epoch_skip_job.py", "tests/jobs/epoch_skip_job.py", ()),
    "epoch_skip_reseed": Job("tests/jobs/epoch_skip_job.py --reseed", "tests/jobs/epoch_skip_job.py", ("--reseed",)),
    "epoch_skip_robust": Job("tests/jobs/epoch_skip_job.py --robust", "tests/jobs/epoch_skip_job.py", ("--robust",)),
    "step_files_job": Job("tests/jobs/step_files_job.py", "tests/jobs/step_files_job.py", ()),
    "step_files_rotate_before": Job("tests/jobs/step_files_job.py --rotate before", "tests/jobs/step_files_job.py",
                                    ("--rotate", "before")),
    "step_files_bytes": Job("tests/jobs/step_files_job.py --writer bytes", "tests/jobs/step_files_job.py",
                            ("--writer", "bytes")),
    "step_files_bytes_loads": Job("tests/jobs/step_files_job.py --writer bytes --resume loads",
                                  "tests/jobs/step_files_job.py", ("--writer", "bytes", "--resume", "loads")),
    "state_job": Job("tests/jobs/state_job.py", "tests/jobs/state_job.py", ()),
    "state_optimizer": Job("tests/jobs/state_job.py --unsaved optimizer", "tests/jobs/state_job.py",
                           ("--unsaved", "optimizer")),
    "state_buffers": Job("tests/jobs/state_job.py --unsaved buffers", "tests/jobs/state_job.py", ("--unsaved", "buffers")),
    "state_two": Job("tests/jobs/state_job.py --unsaved optimizer --unsaved scheduler", "tests/jobs/state_job.py",
                     ("--unsaved", "optimizer", "--unsaved", "scheduler")),
    "async_slow_robust": Job("tests/jobs/slow_daemon_job.py", "tests/jobs/slow_daemon_job.py", ()),
    "async_slow_daemon": Job("tests/jobs/slow_daemon_job.py --daemon", "tests/jobs/slow_daemon_job.py", ("--daemon",)),
    "dcp_async_single": Job("tests/jobs/dcp_async_single_job.py", "tests/jobs/dcp_async_single_job.py", ()),
    "dcp_async_single_naive": Job("tests/jobs/dcp_async_single_job.py --naive", "tests/jobs/dcp_async_single_job.py",
                                  ("--naive",)),
    "preempt_atomic": Job("tests/jobs/preempt_job.py --handler atomic --slow 2", "tests/jobs/preempt_job.py",
                          ("--handler", "atomic", "--slow", "2")),
    "preempt_inplace": Job("tests/jobs/preempt_job.py --handler inplace --slow 2", "tests/jobs/preempt_job.py",
                           ("--handler", "inplace", "--slow", "2")),
    "preempt_exit": Job("tests/jobs/preempt_job.py --handler exit", "tests/jobs/preempt_job.py", ("--handler", "exit")),
    "preempt_none": Job("tests/jobs/preempt_job.py --handler none", "tests/jobs/preempt_job.py", ("--handler", "none")),
}

SWEEP_JOBS = {
    "sweep_unlink_job": Job("tests/jobs/sweep_unlink_job.py", "tests/jobs/sweep_unlink_job.py", ("--epochs", "3")),
}
"""Jobs judged by the sweep alone: their defect is one crash window inside the save, which a fault placed once
(after the save returns, or halfway through its writes) never lands in."""

SIGNAL_JOBS = {
    "preempt_ddp": Job("tests/jobs/preempt_job.py --ddp (2 ranks)", "tests/jobs/preempt_job.py", ("--ddp",), nproc=2),
    "preempt_launcher": Job("tests/jobs/preempt_launcher.sh", "tests/jobs/preempt_launcher.sh", (),
                            beside=("tests/jobs/preempt_job.py",)),
}
"""Jobs judged under preemption alone: who the signal reaches (every rank, or the launcher that must pass it on)."""

FRAMEWORK_JOBS = {
    "hf_trainer": Job("tests/jobs/hf_trainer_job.py", "tests/jobs/hf_trainer_job.py", ()),
    "hf_trainer_robust": Job("tests/jobs/hf_trainer_job.py --resume-complete", "tests/jobs/hf_trainer_job.py",
                             ("--resume-complete",)),
    "accelerate": Job("tests/jobs/accelerate_job.py", "tests/jobs/accelerate_job.py", ()),
    "accelerate_robust": Job("tests/jobs/accelerate_job.py --total-limit 2 --resume-complete",
                             "tests/jobs/accelerate_job.py", ("--total-limit", "2", "--resume-complete")),
    "accelerate_eval": Job("tests/jobs/accelerate_job.py --total-limit 2 --resume-complete --eval after-save",
                           "tests/jobs/accelerate_job.py",
                           ("--total-limit", "2", "--resume-complete", "--eval", "after-save")),
    "accelerate_eval_robust": Job("tests/jobs/accelerate_job.py --total-limit 2 --resume-complete --eval before-save "
                                  "--loader-generator", "tests/jobs/accelerate_job.py",
                                  ("--total-limit", "2", "--resume-complete", "--eval", "before-save",
                                   "--loader-generator")),
    "dcp": Job("tests/jobs/dcp_job.py (2 ranks)", "tests/jobs/dcp_job.py", (), nproc=2),
    "dcp_robust": Job("tests/jobs/dcp_job.py --resume-complete (2 ranks)", "tests/jobs/dcp_job.py",
                      ("--resume-complete",), nproc=2),
    "dcp_async": Job("tests/jobs/dcp_async_job.py (2 ranks)", "tests/jobs/dcp_async_job.py", (), nproc=2),
    "dcp_async_robust": Job("tests/jobs/dcp_async_job.py --robust (2 ranks)", "tests/jobs/dcp_async_job.py",
                            ("--robust",), nproc=2),
    "dcp_async_process_robust": Job("tests/jobs/dcp_async_job.py --robust --process (2 ranks)",
                                    "tests/jobs/dcp_async_job.py", ("--robust", "--process"), nproc=2),
}

SINGLE = "rank-epoch-skew needs a job of 2 or more ranks: a one-rank job is refused at once, nothing run"
LIGHTNING_FILE_OBJECT = ("Lightning never fsyncs: the checkpoint it saves into memory and moves in from a temporary "
                         "file comes back empty, and fit(ckpt_path='last') crashes loading it")

MIDEPOCH_SKIP = ("a mid-epoch checkpoint (atomic) records only the epoch; the resume starts the next epoch, skipping the "
                 "rest of the saved one (midepoch_job.truth.md)")
MIDEPOCH_REPLAY = ("a mid-epoch checkpoint (atomic) records only the epoch; the resume starts that epoch again, training "
                   "once more on the batches the checkpoint holds (midepoch_job.truth.md)")
MIDEPOCH_POSITION = "atomic save of the epoch and the position in it; the resume skips the batches already trained"
MIDEPOCH_REPLAY_RNG = ("the epoch-start replay with dropout, torch's RNG state saved and restored: the replay is the "
                       "one cause, the stream was restored (midepoch_job.truth.md); the loader's generator, reseeded "
                       "each epoch, needs no saving")
MIDEPOCH_POSITION_RNG = ("the position saved, with dropout and torch's RNG state: the resume reproduces bitwise "
                         "(midepoch_job.truth.md)")
DAEMON_EXIT = ("the reference run itself exits 0 while its daemon saver is still writing step 24's checkpoint (10 "
               "runs of 10): the final checkpoint never lands (async_thread_job.truth.md)")

SCHEDULER = ("model, optimizer, RNG and step saved atomically, the LR scheduler not: a resume's new scheduler starts "
             "the cosine again and the loss differs two steps after the checkpoint it took (scheduler_job.truth.md)")

SCHEDULER_SAVED = "the scheduler saved too: the resume starts from the checkpoint it finds and reproduces"

STATE = "model, buffers, Adam, scheduler, RNG and step saved atomically and fsynced (state_job.truth.md)"
STATE_OPTIMIZER = ("Adam's moments not saved: the resumed optimizer holds no state and its learning rate is the "
                   "initial one, the loss differs from the second resumed step (state_job.truth.md)")
STATE_BUFFERS = ("the parameters saved without batch norm's running statistics: every loss matches (training uses "
                 "batch statistics), but the resumed model's buffers are not the uninterrupted run's (state_job.truth.md)")
STATE_TWO = ("neither the optimizer nor the scheduler saved: both named, the optimizer first (state_job.truth.md)")

COUNTER = ("batches sliced from a tensor by a counter that starts at 0 in every process, the checkpoint without it: "
           "the resume trains again on the batches of steps 1-8, named by what the model consumed, with no "
           "DataLoader (counter_job.truth.md)")
COUNTER_ROBUST = "the counter derived from the restored step: the resume reproduces"

EPOCH_SKIP = ("a mid-epoch checkpoint with the epoch only, resumed at the next epoch, torch's stream never saved: "
              "the stream starts again from the seed, so the resume's epochs draw the uninterrupted run's first "
              "orders again and it trains once more on the batches of steps 1-16, named by what the model "
              "consumed (epoch_skip_job.truth.md)")
EPOCH_SKIP_RESEED = ("the same checkpoint, and the resume seeds torch with the epoch it resumes at: it skips the "
                     "rest of the saved epoch (fewer steps) and draws orders the uninterrupted run never drew, two "
                     "defects, both named (epoch_skip_job.truth.md)")
EPOCH_SKIP_ROBUST = "the position in the epoch, its order and torch's RNG state saved: the resume reproduces"

STEP_FILES = ("step-named files in one folder, each written to a temporary name, fsynced and renamed, the folder "
              "fsynced, the old file deleted after (step_files_job.truth.md)")
STEP_FILES_BEFORE = ("the old file deleted before the new one is written: the fault leaves only the new save's "
                     "temporary file, and the resume starts from scratch (step_files_job.truth.md)")
STEP_FILES_BYTES = ("serialized to memory, its bytes written straight to the step-named file, the newest 2 kept: the "
                    "fault leaves the new file torn beside a complete older one, and the resume takes the newest by "
                    "name and crashes (step_files_job.truth.md)")
STEP_FILES_LOADS = "the same, resumed from the newest file that loads: it falls back to the complete older one"

SLOW_EXIT = ("the reference run exits 0 while the thread handed step 24's snapshot still waits for the store: "
             "the final checkpoint never begins, never lands (slow_daemon_job.truth.md)")

PRELOAD = ("a zero-gradient Adam step before the load, then the newest (atomic) checkpoint: every later loss matches "
           "(preload_job.truth.md)")

ROWS: List[Tuple[str, str, str, str, str]] = [
    # job, scenario (and any -p KEY=VALUE it carries), expected verdict, expected cause, why
    ("robust_train", "kill9-mid-save", "PASSED", "last-good", "temporary file, fsync, rename, directory fsync"),
    ("robust_train", "enospc", "PASSED", "last-good", "the full disk fails the temporary file; last.pt is intact"),
    ("robust_train", "power-loss", "PASSED", "last-good", "data and name are fsynced before the save returns"),
    ("robust_train", "eval-left-on", "PASSED", "last-good", "model.train() at the start of every epoch"),
    ("robust_train", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("naive_train", "kill9-mid-save", "FAILED", "crashed, torn-checkpoint", "torch.save straight over its only checkpoint"),
    ("naive_train", "enospc", "FAILED", "crashed, torn-checkpoint", "torch.save straight over its only checkpoint"),
    ("naive_train", "power-loss", "FAILED", "crashed, acknowledged-checkpoint-lost", "no fsync: the data is lost"),
    ("naive_train", "eval-left-on", "FAILED", "last-good, eval-mode-in-training", "never calls model.train()"),
    ("naive_train", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("lightning_train", "kill9-mid-save", "PASSED", "last-good", "save_last='link' and an RNG callback"),
    ("lightning_train", "enospc", "PASSED", "last-good", "the failed save never replaces last.ckpt"),
    ("lightning_train", "power-loss", "FAILED", "crashed, acknowledged-checkpoint-lost", LIGHTNING_FILE_OBJECT),
    ("lightning_train", "eval-left-on", "PASSED", "last-good", "self.train() at every epoch start"),
    ("lightning_train", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("train_job", "kill9-mid-save", "PASSED", "last-good", "atomic save; every random stream restored"),
    ("train_job", "enospc", "PASSED", "last-good", "atomic save"),
    ("train_job", "power-loss", "PASSED", "last-good", "fsync and directory fsync"),
    ("train_job", "eval-left-on", "FAILED", "last-good, eval-mode-in-training", "never calls model.train()"),
    ("train_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("lightning_job", "kill9-mid-save", "FAILED", "older, resume-chose-older + rng-not-restored",
     "save_last=True: killed in checkpoint 2's last.ckpt, fit(ckpt_path='last') resumes from step 4 although "
     "epoch=1-step=8.ckpt is complete; its loader's generator is not saved either"),
    ("lightning_job", "enospc", "FAILED", "older, resume-chose-older + rng-not-restored",
     "the failed last.ckpt save leaves the previous last.ckpt (step 4) while epoch=1-step=8.ckpt is complete"),
    ("lightning_job", "power-loss", "FAILED", "crashed, acknowledged-checkpoint-lost", LIGHTNING_FILE_OBJECT),
    ("lightning_job", "eval-left-on", "FAILED", "last-good, eval-mode-in-training",
     "Lightning keeps the mode a module is in (checked: it trained in eval mode); its loader's generator is not "
     "saved either"),
    ("lightning_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("lightning_async_job", "kill9-mid-save", "FAILED", "older, resume-chose-older",
     "AsyncCheckpointIO: the worker thread writes epoch=1-step=16.ckpt then last.ckpt while steps 17 on train; "
     "killed in last.ckpt's write, fit(ckpt_path='last') resumes step 8 although epoch=1-step=16.ckpt is complete "
     "(losses reproduce from there; lightning_async_job.truth.md)"),
    ("lightning_async_job", "enospc", "FAILED", "older, resume-chose-older",
     "the failed background last.ckpt save keeps step 8 while epoch=1-step=16.ckpt is complete; the error is "
     "raised at the next save, 8 steps later, and again at teardown: exit 1, observed late, not lost"),
    ("lightning_async_job", "power-loss", "FAILED", "crashed, acknowledged-checkpoint-lost",
     LIGHTNING_FILE_OBJECT + " (the checkpoint is complete at the worker thread's rename, not when save_checkpoint "
     "returns)"),
    ("lightning_async_job", "eval-left-on", "PASSED", "last-good",
     "the clean kill comes after checkpoint 2's background writes: last.ckpt holds step 16; self.train() at every "
     "epoch start, no dropout or batch norm"),
    ("lightning_async_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("ddp_job", "kill9-mid-save", "PASSED", "last-good", "rank 0 saves atomically; the epoch is in the checkpoint"),
    ("ddp_job", "enospc", "PASSED", "last-good", "rank 0 saves atomically"),
    ("ddp_job", "power-loss", "PASSED", "last-good", "fsync before the rename"),
    ("ddp_job", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("ddp_job", "rank-epoch-skew", "PASSED", "last-good", "one checkpoint from rank 0: every rank loads the same step"),
    ("place_job", "kill9-mid-save", "PASSED", "last-good", "temporary file, fsync, rename; torch's stream restored"),
    ("place_job", "enospc", "PASSED", "last-good", "the full disk fails the temporary file; last.pt is intact"),
    ("place_job", "power-loss", "PASSED", "last-good", "data fsynced before the rename (ordered model)"),
    ("place_job", "eval-left-on", "PASSED", "last-good", "a linear model: eval mode computes the same"),
    ("place_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("writers_job", "kill9-mid-save", "FAILED", "crashed, torn-checkpoint",
     "the kill lands in state.json, written in place by open(): the resume cannot parse it"),
    ("writers_job", "enospc", "FAILED", "crashed, torn-checkpoint",
     "the full disk strikes state.json, written in place: the resume cannot parse it"),
    ("writers_job", "power-loss", "FAILED", "crashed, acknowledged-checkpoint-lost",
     "no fsync: every file of the checkpoint comes back empty"),
    ("writers_job", "eval-left-on", "PASSED", "last-good", "a linear model: eval mode computes the same"),
    ("writers_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("membuf_job", "kill9-mid-save", "FAILED", "crashed, torn-checkpoint",
     "serialized into a BytesIO, then written over last.pt: the kill lands in that file write, not in memory"),
    ("membuf_job", "enospc", "FAILED", "crashed, torn-checkpoint",
     "the full disk fails the write of the in-memory checkpoint over last.pt, never the BytesIO"),
    ("membuf_job", "power-loss", "FAILED", "crashed, acknowledged-checkpoint-lost", "no fsync: last.pt comes back empty"),
    ("membuf_job", "eval-left-on", "FAILED", "last-good, eval-mode-in-training", "never calls model.train()"),
    ("membuf_job", "enospc -p free_bytes=0", "FAILED", "crashed, torn-checkpoint",
     "the disk stays full from save 2's start: write_bytes opens last.pt with O_TRUNC and its one write fails, "
     "leaving 0 bytes (the in-place save is named: membuf_job.truth.md)"),
    ("membuf_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("membuf_robust", "kill9-mid-save", "PASSED", "last-good",
     "the in-memory checkpoint goes to a temporary file, fsynced, renamed over last.pt, folder fsynced"),
    ("membuf_robust", "enospc", "PASSED", "last-good", "the full disk fails the temporary file; last.pt is intact"),
    ("membuf_robust", "power-loss", "PASSED", "last-good", "data and name fsynced before the save returns"),
    ("membuf_robust", "eval-left-on", "FAILED", "last-good, eval-mode-in-training", "never calls model.train()"),
    ("membuf_robust", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("membuf_fallback", "kill9-mid-save", "FAILED", "scratch, torn-checkpoint",
     "the kill in save 2's write_bytes leaves last.pt empty (the truncation came first); the resume cannot load it "
     "and starts from scratch (by hand: strace SIGKILL at the second write of last.pt, 'cannot load', epoch 0 again)"),
    ("membuf_fallback", "enospc", "FAILED", "scratch, torn-checkpoint",
     "the full disk fails save 2's write into the truncated last.pt; the resume cannot load it and starts over"),
    ("membuf_fallback", "power-loss", "FAILED", "scratch, acknowledged-checkpoint-lost",
     "no fsync: last.pt comes back empty, and the resume starts from scratch"),
    ("membuf_fallback", "eval-left-on", "FAILED", "last-good, eval-mode-in-training", "never calls model.train()"),
    ("membuf_fallback", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("bestcopy_job", "kill9-mid-save", "PASSED", "last-good",
     "the kill lands in best.pt's copy: the resume reads last.pt (atomic) and passes, with a torn-copy warning "
     "naming ckpt/best.pt (bestcopy_job.truth.md)"),
    ("bestcopy_job", "enospc", "PASSED", "last-good",
     "the full disk fails best.pt's copy, the job exits; the resume reads last.pt (atomic), with a torn-copy warning"),
    ("bestcopy_job", "power-loss", "FAILED", "last-good, acknowledged-checkpoint-lost",
     "last.pt is fsynced and survives; best.pt, copied after the save without an fsync, comes back empty"),
    ("bestcopy_job", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("bestcopy_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("ema_job", "kill9-mid-save", "FAILED", "last-good, resumed-other-weights",
     "last.pt is atomic and survives, but the resume loads its 'ema' tensors into the model (ema_job.truth.md)"),
    ("ema_job", "enospc", "FAILED", "last-good, resumed-other-weights",
     "the full disk fails the temporary file; the resume loads last.pt's 'ema' tensors into the model"),
    ("ema_job", "power-loss", "FAILED", "last-good, resumed-other-weights",
     "data and name fsynced, last.pt survives; the resume loads its 'ema' tensors into the model"),
    ("ema_job", "eval-left-on", "FAILED", "last-good, resumed-other-weights",
     "the resume loads the 'ema' tensors into the model (no dropout or batch norm: eval mode changes nothing)"),
    ("ema_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("ema_job_model", "kill9-mid-save", "PASSED", "last-good", "atomic save; the resume loads 'model' into the model"),
    ("ema_job_model", "enospc", "PASSED", "last-good", "the full disk fails the temporary file; last.pt is intact"),
    ("ema_job_model", "power-loss", "PASSED", "last-good", "data and name fsynced before the save returns"),
    ("ema_job_model", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("ema_job_model", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("ema_module_job", "kill9-mid-save", "FAILED", "last-good, resumed-other-weights",
     "last.pt is atomic and survives; the resume, as Ultralytics', takes the model's weights from ckpt['ema'], a "
     "half-precision module pickled whole (ema_module_job.truth.md)"),
    ("ema_module_job", "enospc", "FAILED", "last-good, resumed-other-weights",
     "the full disk fails the temporary file; the resume loads last.pt's half-precision EMA module into the model"),
    ("ema_module_job", "power-loss", "FAILED", "last-good, resumed-other-weights",
     "file and folder fsynced at every save: last.pt survives whole (no acknowledged-checkpoint-lost); the resume "
     "loads its half-precision EMA module into the model"),
    ("ema_module_job", "eval-left-on", "FAILED", "last-good, resumed-other-weights",
     "the resume loads the half-precision EMA module into the model (no dropout or batch norm: eval mode changes "
     "nothing)"),
    ("ema_module_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("midepoch_job", "kill9-mid-save", "FAILED", "last-good, steps-skipped", MIDEPOCH_SKIP),
    ("midepoch_job", "enospc", "FAILED", "last-good, steps-skipped", MIDEPOCH_SKIP),
    ("midepoch_job", "power-loss", "FAILED", "last-good, steps-skipped",
     "fsynced, so the checkpoint survives; resumed, it skips the rest of its epoch (midepoch_job.truth.md)"),
    ("midepoch_job", "eval-left-on", "FAILED", "last-good, steps-skipped",
     "no dropout or batch norm, so eval mode computes the same: the divergence is the skipped steps"),
    ("midepoch_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("midepoch_replay", "kill9-mid-save", "FAILED", "last-good, steps-replayed", MIDEPOCH_REPLAY),
    ("midepoch_replay", "enospc", "FAILED", "last-good, steps-replayed", MIDEPOCH_REPLAY),
    ("midepoch_replay", "power-loss", "FAILED", "last-good, steps-replayed", MIDEPOCH_REPLAY),
    ("midepoch_replay", "eval-left-on", "FAILED", "last-good, steps-replayed",
     "no dropout or batch norm, so eval mode computes the same: the divergence is the replayed steps"),
    ("midepoch_replay", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("midepoch_replay_rng", "kill9-mid-save", "FAILED", "last-good, steps-replayed only", MIDEPOCH_REPLAY_RNG),
    ("midepoch_replay_rng", "enospc", "FAILED", "last-good, steps-replayed only", MIDEPOCH_REPLAY_RNG),
    ("midepoch_replay_rng", "power-loss", "FAILED", "last-good, steps-replayed only", MIDEPOCH_REPLAY_RNG),
    ("midepoch_replay_rng", "eval-left-on", "FAILED", "last-good, steps-replayed + eval-mode-in-training",
     MIDEPOCH_REPLAY_RNG + "; dropout left off by eval mode as well"),
    ("midepoch_replay_rng", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("midepoch_position_rng", "kill9-mid-save", "PASSED", "last-good", MIDEPOCH_POSITION_RNG),
    ("midepoch_position_rng", "enospc", "PASSED", "last-good", MIDEPOCH_POSITION_RNG),
    ("midepoch_position_rng", "power-loss", "PASSED", "last-good", MIDEPOCH_POSITION_RNG),
    ("midepoch_position_rng", "eval-left-on", "FAILED", "last-good, eval-mode-in-training only",
     MIDEPOCH_POSITION_RNG + "; eval mode turns the dropout off"),
    ("midepoch_position_rng", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("midepoch_position", "kill9-mid-save", "PASSED", "last-good", MIDEPOCH_POSITION),
    ("midepoch_position", "enospc", "PASSED", "last-good", MIDEPOCH_POSITION),
    ("midepoch_position", "power-loss", "PASSED", "last-good", MIDEPOCH_POSITION),
    ("midepoch_position", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("midepoch_position", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("preload_job", "kill9-mid-save", "PASSED", "last-good", PRELOAD),
    ("preload_job", "enospc", "PASSED", "last-good", PRELOAD),
    ("preload_job", "power-loss", "PASSED", "last-good", PRELOAD),
    ("preload_job", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("preload_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("cwd_ckpt_job", "kill9-mid-save", "PASSED", "last-good",
     "last.pt beside the script and its data, saved atomically: the kill tears last.pt.tmp (cwd_ckpt_job.truth.md)"),
    ("cwd_ckpt_job", "enospc", "PASSED", "last-good", "the full disk fails last.pt.tmp; last.pt is intact"),
    ("cwd_ckpt_job", "power-loss", "PASSED", "last-good",
     "last.pt is fsynced and its folder too; the data-preparation step's files are not the checkpoint's, and are "
     "left as it wrote them"),
    ("cwd_ckpt_job", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("cwd_ckpt_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("link_job", "kill9-mid-save", "PASSED", "last-good",
     "the kill lands in the os.pwrite of last.pt.tmp (opened by dir_fd); epoch-0.pt, a hard link, is whole "
     "(link_job.truth.md)"),
    ("link_job", "enospc", "PASSED", "last-good",
     "the full disk fails an os.pwrite of last.pt.tmp; the links are intact"),
    ("link_job", "power-loss", "PASSED", "last-good",
     "the data is fsynced, the folder fsynced after the links: epoch-1.pt, the name the resume reads, survives"),
    ("link_job", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("link_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("safetensors_job", "kill9-mid-save", "PASSED", "last-good",
     "safetensors writes a temporary file and renames it: the kill leaves the old model.safetensors whole "
     "(safetensors_job.truth.md)"),
    ("safetensors_job", "enospc", "PASSED", "last-good",
     "safetensors removes its temporary file on the error; the old model.safetensors is whole"),
    ("safetensors_job", "power-loss", "FAILED", "crashed, acknowledged-checkpoint-lost",
     "safetensors never fsyncs: the renamed model.safetensors comes back empty under the ordered model"),
    ("safetensors_job", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("safetensors_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("async_thread_job", "kill9-mid-save", "PASSED", "last-good",
     "the kill lands in the background thread's write of last.pt.tmp while the main thread trains on; last.pt, "
     "renamed only after an fsync, is the previous checkpoint, whole (async_thread_job.truth.md)"),
    ("async_thread_job", "enospc", "PASSED", "last-good",
     "the background write fails; the main thread re-raises the error at the next hand-over and the job stops; "
     "last.pt is intact"),
    ("async_thread_job", "power-loss", "PASSED", "last-good",
     "the saver fsyncs the file before the rename and the folder after it: last.pt is always a whole checkpoint"),
    ("async_thread_job", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("async_thread_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("async_thread_pause", "kill9-mid-save", "PASSED", "last-good", ASYNC_PAUSE),
    ("async_thread_pause", "enospc", "PASSED", "last-good", ASYNC_PAUSE),
    ("async_thread_pause", "power-loss", "PASSED", "last-good", ASYNC_PAUSE),
    ("async_thread_pause", "eval-left-on", "PASSED", "last-good", ASYNC_PAUSE + "; " + EVAL_SAME),
    ("async_thread_pause", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("scheduler_job", "kill9-mid-save", "FAILED", "last-good, scheduler-not-restored", SCHEDULER),
    ("scheduler_job", "enospc", "FAILED", "last-good, scheduler-not-restored", "the full disk fails the temporary file, last.pt is intact; "
     + SCHEDULER),
    ("scheduler_job", "power-loss", "FAILED", "last-good, scheduler-not-restored", "fsynced, the checkpoint survives; " + SCHEDULER),
    ("scheduler_job", "eval-left-on", "FAILED", "last-good, scheduler-not-restored", "no dropout or batch norm: eval mode computes the "
     "same; " + SCHEDULER),
    ("scheduler_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("own_path_job", "kill9-mid-save", "FAILED", "crashed, resume-chose-incomplete",
     "its own folder's path in each file: half of save 2 is current.pt's first byte in every sandbox, and the resume "
     "cannot load the torn current.pt although step_16.pt is whole (own_path_job.truth.md)"),
    ("own_path_job", "enospc", "FAILED", "crashed, resume-chose-incomplete",
     "the full disk fails current.pt's first write after torch.save truncated it: the resume cannot load it"),
    ("own_path_job", "power-loss", "FAILED", "crashed, acknowledged-checkpoint-lost", "no fsync: the data is lost"),
    ("own_path_job", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("own_path_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("state_job", "kill9-mid-save", "PASSED", "last-good", STATE),
    ("state_job", "enospc", "PASSED", "last-good", STATE),
    ("state_job", "power-loss", "PASSED", "last-good", STATE),
    ("state_job", "eval-left-on", "PASSED", "last-good", STATE + "; model.train() before training"),
    ("state_optimizer", "kill9-mid-save", "FAILED", "last-good, optimizer-not-restored", STATE_OPTIMIZER),
    ("state_optimizer", "enospc", "FAILED", "last-good, optimizer-not-restored", STATE_OPTIMIZER),
    ("state_optimizer", "power-loss", "FAILED", "last-good, optimizer-not-restored", STATE_OPTIMIZER),
    ("state_buffers", "kill9-mid-save", "FAILED", "last-good, buffers-not-restored", STATE_BUFFERS),
    ("state_buffers", "enospc", "FAILED", "last-good, buffers-not-restored", STATE_BUFFERS),
    ("state_buffers", "power-loss", "FAILED", "last-good, buffers-not-restored", STATE_BUFFERS),
    ("state_two", "kill9-mid-save", "FAILED", "last-good, optimizer-not-restored", STATE_TWO),
    ("state_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("counter_job", "kill9-mid-save", "FAILED", "last-good, steps-replayed", COUNTER),
    ("counter_job", "enospc", "FAILED", "last-good, steps-replayed", COUNTER),
    ("counter_job", "power-loss", "FAILED", "last-good, steps-replayed", COUNTER),
    ("counter_job", "eval-left-on", "FAILED", "last-good, steps-replayed", COUNTER + "; no dropout or batch norm: "
     "eval mode computes the same"),
    ("counter_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("counter_robust", "kill9-mid-save", "PASSED", "last-good", COUNTER_ROBUST),
    ("counter_robust", "enospc", "PASSED", "last-good", COUNTER_ROBUST),
    ("counter_robust", "power-loss", "PASSED", "last-good", COUNTER_ROBUST),
    ("counter_robust", "eval-left-on", "PASSED", "last-good", COUNTER_ROBUST + "; no dropout or batch norm: eval "
     "mode computes the same"),
    ("counter_robust", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("epoch_skip_job", "kill9-mid-save", "FAILED", "last-good, steps-replayed", EPOCH_SKIP),
    ("epoch_skip_job", "enospc", "FAILED", "last-good, steps-replayed", EPOCH_SKIP),
    ("epoch_skip_job", "power-loss", "FAILED", "last-good, steps-replayed", EPOCH_SKIP),
    ("epoch_skip_job", "eval-left-on", "FAILED", "last-good, steps-replayed + eval-mode-in-training", EPOCH_SKIP
     + "; and the modules train in eval mode (the job never calls model.train())"),
    ("epoch_skip_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("epoch_skip_reseed", "kill9-mid-save", "FAILED", "last-good, rng-not-restored + step-count-differs",
     EPOCH_SKIP_RESEED),
    ("epoch_skip_reseed", "enospc", "FAILED", "last-good, rng-not-restored + step-count-differs", EPOCH_SKIP_RESEED),
    ("epoch_skip_reseed", "power-loss", "FAILED", "last-good, rng-not-restored + step-count-differs",
     EPOCH_SKIP_RESEED),
    ("epoch_skip_reseed", "eval-left-on", "FAILED",
     "last-good, eval-mode-in-training + rng-not-restored + step-count-differs",
     EPOCH_SKIP_RESEED + "; and the modules train in eval mode (the job never calls model.train())"),
    ("epoch_skip_reseed", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("epoch_skip_robust", "kill9-mid-save", "PASSED", "last-good", EPOCH_SKIP_ROBUST),
    ("epoch_skip_robust", "enospc", "PASSED", "last-good", EPOCH_SKIP_ROBUST),
    ("epoch_skip_robust", "power-loss", "PASSED", "last-good", EPOCH_SKIP_ROBUST),
    ("epoch_skip_robust", "eval-left-on", "FAILED", "last-good, eval-mode-in-training", "the job never calls "
     "model.train(): dropout stays off after the resume"),
    ("epoch_skip_robust", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("step_files_job", "kill9-mid-save", "PASSED", "last-good", STEP_FILES),
    ("step_files_job", "enospc", "PASSED", "last-good", STEP_FILES),
    ("step_files_job", "power-loss", "PASSED", "last-good", STEP_FILES),
    ("step_files_job", "eval-left-on", "PASSED", "last-good", STEP_FILES + "; " + EVAL_SAME),
    ("step_files_job", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("step_files_rotate_before", "kill9-mid-save", "FAILED", "scratch, rotation-before-complete", STEP_FILES_BEFORE),
    ("step_files_rotate_before", "enospc", "FAILED", "scratch, rotation-before-complete", STEP_FILES_BEFORE),
    ("step_files_rotate_before", "power-loss", "PASSED", "last-good", "the old file deleted before the new one is "
     "written, but the power goes once save 2 is complete and durable: the resume takes it (step_files_job.truth.md)"),
    ("step_files_bytes", "kill9-mid-save", "FAILED", "crashed, resume-chose-incomplete", STEP_FILES_BYTES),
    ("step_files_bytes", "enospc", "FAILED", "crashed, resume-chose-incomplete", STEP_FILES_BYTES),
    ("step_files_bytes", "power-loss", "FAILED", "crashed, acknowledged-checkpoint-lost", STEP_FILES_BYTES +
     "; never fsynced, the file of step 16 is empty after the power loss"),
    ("step_files_rotate_before", "eval-left-on", "PASSED", "last-good", "the clean kill comes once save 2 is "
     "complete: the resume takes it; " + EVAL_SAME),
    ("step_files_rotate_before", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("step_files_bytes", "eval-left-on", "PASSED", "last-good", "the clean kill comes once save 2 is complete: the "
     "resume takes it; " + EVAL_SAME),
    ("step_files_bytes", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("step_files_bytes_loads", "power-loss", "FAILED", "scratch, acknowledged-checkpoint-lost", STEP_FILES_LOADS +
     "; never fsynced, neither file survives the power loss whole, so none loads (step_files_job.truth.md)"),
    ("step_files_bytes_loads", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("step_files_bytes_loads", "kill9-mid-save", "PASSED", "last-good", STEP_FILES_LOADS),
    ("step_files_bytes_loads", "enospc", "PASSED", "last-good", STEP_FILES_LOADS),
    ("step_files_bytes_loads", "eval-left-on", "PASSED", "last-good", STEP_FILES_LOADS + "; " + EVAL_SAME),
    ("state_optimizer", "eval-left-on", "FAILED", "last-good, optimizer-not-restored only", STATE_OPTIMIZER + "; "
     "model.train() before training puts the mode back"),
    ("state_optimizer", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("state_buffers", "eval-left-on", "FAILED", "last-good, buffers-not-restored only", STATE_BUFFERS + "; "
     "model.train() before training puts the mode back"),
    ("state_buffers", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("state_two", "enospc", "FAILED", "last-good, optimizer-not-restored", STATE_TWO),
    ("state_two", "power-loss", "FAILED", "last-good, optimizer-not-restored", STATE_TWO),
    ("state_two", "eval-left-on", "FAILED", "last-good, optimizer-not-restored", STATE_TWO),
    ("state_two", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("scheduler_saved", "kill9-mid-save", "PASSED", "last-good", SCHEDULER_SAVED),
    ("scheduler_saved", "enospc", "PASSED", "last-good", SCHEDULER_SAVED),
    ("scheduler_saved", "power-loss", "PASSED", "last-good", SCHEDULER_SAVED),
    ("scheduler_saved", "eval-left-on", "PASSED", "last-good", SCHEDULER_SAVED),
    ("scheduler_saved", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("async_thread_daemon", "kill9-mid-save", "FAILED", "last-good, exit-with-save-in-flight",
     "the resume takes the previous last.pt, whole; but " + DAEMON_EXIT),
    ("async_thread_daemon", "enospc", "FAILED", "survived, background-error-unobserved",
     "the daemon saver dies of the error (threading prints it), the job trains on to its end (it survived the "
     "fault) believing steps 12, 18 and 24 saved; a later resume takes step 6 (async_thread_job.truth.md)"),
    ("async_thread_daemon", "power-loss", "FAILED", "last-good, exit-with-save-in-flight",
     "fsync before the rename, folder fsync after: the saves that finish survive; but " + DAEMON_EXIT),
    ("async_thread_daemon", "eval-left-on", "FAILED", "last-good, exit-with-save-in-flight",
     "no dropout or batch norm: eval mode computes the same; but " + DAEMON_EXIT),
    ("async_thread_daemon", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("async_thread_native", "kill9-mid-save", "FAILED", "last-good, exit-with-save-in-flight",
     "the kill lands in save 2's torch.save on the daemon thread; the resume takes step 6's last.pt, whole; but the "
     "uninterrupted run exits with step 24's save inside torch.save (and most often dies of SIGABRT in its shutdown)"),
    ("async_thread_native", "enospc", "FAILED", "survived, background-error-unobserved",
     "the saver prints the error and goes on; the job trains to its end, saves step 18, and exits with step 24's "
     "save in flight, by SIGABRT, SIGSEGV or status 0 as the shutdown falls (async_thread_job.truth.md): the same "
     "verdict each way"),
    ("async_thread_native", "power-loss", "FAILED", "last-good, exit-with-save-in-flight",
     "fsync before the rename, folder fsync after: the saves that finish survive; but the uninterrupted run exits "
     "with step 24's save inside torch.save"),
    ("async_thread_native", "eval-left-on", "FAILED", "last-good, exit-with-save-in-flight",
     "no dropout or batch norm: eval mode computes the same; but the uninterrupted run exits with step 24's save "
     "inside torch.save"),
    ("async_thread_native", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("async_slow_robust", "kill9-mid-save", "PASSED", "last-good",
     "the kill lands in save 2's torch.save on the saver thread, the training held at its next step; last.pt, "
     "renamed only after an fsync, is step 6's, whole (slow_daemon_job.truth.md)"),
    ("async_slow_robust", "enospc", "PASSED", "last-good",
     "the saver keeps the error and the main thread raises it after join(), before the next save: exit 1 with "
     "last.pt (step 6) whole"),
    ("async_slow_robust", "power-loss", "PASSED", "last-good",
     "fsync before the rename, folder fsync after: the completed save of step 12 survives"),
    ("async_slow_robust", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("async_slow_robust", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("async_slow_daemon", "kill9-mid-save", "FAILED", "last-good, exit-with-save-in-flight",
     "the resume takes step 6's last.pt, whole; but " + SLOW_EXIT),
    ("async_slow_daemon", "enospc", "FAILED", "survived, background-error-unobserved",
     "the daemon saver dies of the error (threading prints it) and the job trains on to its end unaware; "
     "but " + SLOW_EXIT),
    ("async_slow_daemon", "power-loss", "FAILED", "last-good, exit-with-save-in-flight",
     "the completed save of step 12 is fsynced and survives; but " + SLOW_EXIT),
    ("async_slow_daemon", "eval-left-on", "FAILED", "last-good, exit-with-save-in-flight",
     "no dropout or batch norm: eval mode computes the same; but " + SLOW_EXIT),
    ("async_slow_daemon", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("dcp_async_single", "kill9-mid-save", "PASSED", "last-good",
     "waits for step 8's future before step 16's save and rotation: the kill, in step 16's background write "
     "with the training held at its next step, leaves step_16/ without .metadata and the resume takes step_8/ "
     "(dcp_async_single_job.truth.md)"),
    ("dcp_async_single", "enospc", "PASSED", "last-good",
     "future.result() raises the CheckpointException before the save of step 24: exit 1 with step_8/ whole"),
    ("dcp_async_single", "power-loss", "PASSED", "last-good",
     "DCP fsyncs the shard and .metadata before its rename: under the ordered model the completed save of step "
     "16 survives"),
    ("dcp_async_single", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("dcp_async_single", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("dcp_async_single_naive", "kill9-mid-save", "FAILED", "crashed, rotation-before-complete",
     "deletes step_8/ as soon as async_save of step 16 returns; the kill leaves step_16/ without .metadata and "
     "the resume takes it and crashes (10 hand kills of 10: dcp_async_single_job.truth.md)"),
    ("dcp_async_single_naive", "enospc", "FAILED", "survived, background-error-unobserved",
     "drops async_save's futures: the CheckpointException of step 16's save is never raised, and step_8/ was "
     "already deleted, so no complete checkpoint existed until step 24's save ended"),
    ("dcp_async_single_naive", "power-loss", "PASSED", "last-good",
     "the power goes once step 16's save has completed (step_8/ deleted, step_16/ fsynced and renamed in order): "
     "the resume takes step_16/"),
    ("dcp_async_single_naive", "eval-left-on", "PASSED", "last-good",
     "the clean kill comes once step 16's save has completed, and the resume takes step_16/; no dropout or batch "
     "norm: eval mode computes the same"),
    ("dcp_async_single_naive", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("robust_train", "preemption", "PASSED", "last-good", AS_KILLED),
    ("naive_train", "preemption", "FAILED", "crashed, torn-checkpoint", AS_KILLED),
    ("lightning_train", "preemption", "PASSED", "last-good",
     "Lightning's SIGTERM handler sets a flag: the checkpoint in progress finishes, the epoch ends and fit raises SIGTERMException (exit 0) with a checkpoint of its step; save_last='link' and an RNG callback: the resume reproduces"),
    ("train_job", "preemption", "PASSED", "last-good", AS_KILLED),
    ("lightning_job", "preemption", "FAILED", "last-good, rng-not-restored",
     "Lightning's SIGTERM handler sets a flag: checkpoint 2 finishes, the epoch ends and fit raises SIGTERMException (exit 0) with a checkpoint of its step, which the resume takes; its loader's generator is not saved, so the resume diverges"),
    ("lightning_async_job", "preemption", "FAILED", "last-good, exit-0-after-preemption",
     "Lightning's SIGTERM handler sets a flag; the signal lands while the worker writes step 16's checkpoints and "
     "the training is at step 17: Lightning trains that batch, raises SIGTERMException and exits with status 0, its "
     "newest checkpoint step 16's (by hand: lightning_async_job.truth.md)"),
    ("ddp_job", "preemption", "PASSED", "last-good", AS_KILLED),
    ("place_job", "preemption", "PASSED", "last-good", AS_KILLED),
    ("writers_job", "preemption", "FAILED", "crashed, torn-checkpoint", AS_KILLED),
    ("membuf_job", "preemption", "FAILED", "crashed, torn-checkpoint", AS_KILLED),
    ("membuf_robust", "preemption", "PASSED", "last-good", AS_KILLED),
    ("membuf_fallback", "preemption", "FAILED", "scratch, torn-checkpoint", AS_KILLED),
    ("bestcopy_job", "preemption", "PASSED", "last-good", AS_KILLED),
    ("ema_job", "preemption", "FAILED", "last-good, resumed-other-weights", AS_KILLED),
    ("ema_job_model", "preemption", "PASSED", "last-good", AS_KILLED),
    ("ema_module_job", "preemption", "FAILED", "last-good, resumed-other-weights", AS_KILLED),
    ("midepoch_job", "preemption", "FAILED", "last-good, steps-skipped", AS_KILLED),
    ("midepoch_replay", "preemption", "FAILED", "last-good, steps-replayed", AS_KILLED),
    ("midepoch_replay_rng", "preemption", "FAILED", "last-good, steps-replayed only", AS_KILLED),
    ("midepoch_position_rng", "preemption", "PASSED", "last-good", AS_KILLED),
    ("midepoch_position", "preemption", "PASSED", "last-good", AS_KILLED),
    ("preload_job", "preemption", "PASSED", "last-good", AS_KILLED),
    ("cwd_ckpt_job", "preemption", "PASSED", "last-good", AS_KILLED),
    ("link_job", "preemption", "PASSED", "last-good", AS_KILLED),
    ("safetensors_job", "preemption", "PASSED", "last-good", AS_KILLED),
    ("async_thread_job", "preemption", "PASSED", "last-good", AS_KILLED),
    ("async_thread_pause", "preemption", "PASSED", "last-good", AS_KILLED),
    ("async_thread_daemon", "preemption", "FAILED", "last-good, exit-with-save-in-flight", AS_KILLED),
    ("async_thread_native", "preemption", "FAILED", "last-good, exit-with-save-in-flight", AS_KILLED),
    ("scheduler_job", "preemption", "FAILED", "last-good, scheduler-not-restored", AS_KILLED),
    ("own_path_job", "preemption", "FAILED", "crashed, resume-chose-incomplete", AS_KILLED),
    ("scheduler_saved", "preemption", "PASSED", "last-good", AS_KILLED),
    ("counter_job", "preemption", "FAILED", "last-good, steps-replayed", AS_KILLED),
    ("counter_robust", "preemption", "PASSED", "last-good", AS_KILLED),
    ("epoch_skip_job", "preemption", "FAILED", "last-good, steps-replayed", AS_KILLED),
    ("epoch_skip_reseed", "preemption", "FAILED", "last-good, rng-not-restored + step-count-differs", AS_KILLED),
    ("epoch_skip_robust", "preemption", "PASSED", "last-good", AS_KILLED),
    ("step_files_job", "preemption", "PASSED", "last-good", AS_KILLED),
    ("step_files_rotate_before", "preemption", "FAILED", "scratch, rotation-before-complete", AS_KILLED),
    ("step_files_bytes", "preemption", "FAILED", "crashed, resume-chose-incomplete", AS_KILLED),
    ("step_files_bytes_loads", "preemption", "PASSED", "last-good", AS_KILLED),
    ("state_job", "preemption", "PASSED", "last-good", AS_KILLED),
    ("state_optimizer", "preemption", "FAILED", "last-good, optimizer-not-restored", AS_KILLED),
    ("state_buffers", "preemption", "FAILED", "last-good, buffers-not-restored", AS_KILLED),
    ("state_two", "preemption", "FAILED", "last-good, optimizer-not-restored", AS_KILLED),
    ("async_slow_robust", "preemption", "PASSED", "last-good", AS_KILLED),
    ("async_slow_daemon", "preemption", "FAILED", "last-good, exit-with-save-in-flight", AS_KILLED),
    ("dcp_async_single", "preemption", "PASSED", "last-good", AS_KILLED),
    ("dcp_async_single_naive", "preemption", "FAILED", "crashed, rotation-before-complete", AS_KILLED),
    ("preempt_atomic", "kill9-mid-save", "PASSED", "last-good", PREEMPT_ATOMIC),
    ("preempt_atomic", "enospc", "PASSED", "last-good", PREEMPT_ATOMIC + "; the full disk's error ends the job"),
    ("preempt_atomic", "power-loss", "PASSED", "last-good", PREEMPT_ATOMIC),
    ("preempt_atomic", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("preempt_atomic", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("preempt_atomic", "preemption", "PASSED", "last-good",
     "the handler's flag, step 17, then an atomic emergency save of step 17 (2 s) inside the 30 s grace: the resume "
     "starts at step 17"),
    ("preempt_atomic", "preemption -p grace=0.5", "PASSED", "last-good",
     "the emergency save of step 17 takes 2 s and the SIGKILL cuts it at 0.5 s (emergency-save-too-long); it wrote "
     "a temporary file, so last.pt of step 16 survives for the resume (preempt_job.truth.md)"),
    ("preempt_inplace", "kill9-mid-save", "PASSED", "last-good", PREEMPT_ATOMIC),
    ("preempt_inplace", "enospc", "PASSED", "last-good", PREEMPT_ATOMIC + "; the full disk's error ends the job"),
    ("preempt_inplace", "power-loss", "PASSED", "last-good", PREEMPT_ATOMIC),
    ("preempt_inplace", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("preempt_inplace", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("preempt_inplace", "preemption", "PASSED", "last-good",
     "the emergency save of step 17, written over last.pt, takes 2 s: inside the 30 s grace it completes, and the "
     "resume starts at step 17"),
    ("preempt_inplace", "preemption -p grace=0.5", "FAILED", "crashed, emergency-save-torn",
     "the emergency save of step 17 is written straight over last.pt and cut by the SIGKILL at 0.5 s: last.pt holds "
     "262,144 of its bytes and the resume crashes on it (preempt_job.truth.md)"),
    ("preempt_exit", "kill9-mid-save", "PASSED", "last-good", PREEMPT_ATOMIC),
    ("preempt_exit", "enospc", "PASSED", "last-good", PREEMPT_ATOMIC + "; the full disk's error ends the job"),
    ("preempt_exit", "power-loss", "PASSED", "last-good", PREEMPT_ATOMIC),
    ("preempt_exit", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("preempt_exit", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("preempt_exit", "preemption", "FAILED", "last-good, exit-0-after-preemption",
     "the handler calls sys.exit(0) inside save 2: status 0 with step 8's checkpoint the newest, steps 9-16 never "
     "saved; a scheduler would never requeue it (preempt_job.truth.md)"),
    ("preempt_none", "kill9-mid-save", "PASSED", "last-good", PREEMPT_ATOMIC),
    ("preempt_none", "enospc", "PASSED", "last-good", PREEMPT_ATOMIC + "; the full disk's error ends the job"),
    ("preempt_none", "power-loss", "PASSED", "last-good", PREEMPT_ATOMIC),
    ("preempt_none", "eval-left-on", "PASSED", "last-good", EVAL_SAME),
    ("preempt_none", "rank-epoch-skew", "REFUSED", "exit 2", SINGLE),
    ("preempt_none", "preemption", "PASSED", "last-good",
     "no handler: SIGTERM ends it inside save 2 and the resume takes step 8's atomic last.pt (no-emergency-save: 8 "
     "steps lost; preempt_job.truth.md)"),
]

SWEEP_ROWS: List[Tuple[str, str, str, str, str]] = [
    ("naive_train", "power-loss -p model=strict", "FAILED", "scratch (step 0) after before the save's first operation",
     "torch.save straight over last.pt, never fsynced: under the strict model no crash point of save 2 leaves a "
     "checkpoint, and every resume trains from scratch (a suite's shared sweep once resumed step 32 in each)"),
    ("sweep_unlink_job", "power-loss", "FAILED", "scratch (step 0) after unlink ckpt/last.pt",
     "unlinks last.pt before renaming tmp.pt over it: a crash in between leaves only tmp.pt, and the resume, which "
     "looks for last.pt alone, trains from scratch (sweep_unlink_job.truth.md)"),
    ("train_job", "power-loss", "PASSED", "last-good in every class",
     "temporary file, fsync, rename, directory fsync: every crash point leaves a last.pt that loads"),
    ("cwd_ckpt_job", "power-loss", "PASSED", "last-good in every class",
     "its folder is the working directory: the crash points are the save's alone (not the data-preparation "
     "process's writes) and the rows list last.pt and last.pt.tmp, not the script or the data"),
    ("scheduler_job", "power-loss", "FAILED",
     "last-good (step 8), diverged at step 11 after before the save's first operation", SCHEDULER),
    ("scheduler_saved", "power-loss", "PASSED", "last-good in every class", SCHEDULER_SAVED),
]
"""Rows run with ``--sweep``: every crash point of the save, one resume per class of crash state."""

SIGNAL_ROWS: List[Tuple[str, str, str, str, str]] = [
    ("preempt_ddp", "preemption -p grace=20", "PASSED", "last-good",
     "both ranks get the SIGTERM, agree on it through an all-reduce, and each saves its own file of step 17 "
     "atomically: the resume starts both at step 17 (preempt_job.truth.md)"),
    ("preempt_ddp", "preemption -p grace=20 -p target=launcher", "PASSED", "last-good",
     "only torchrun gets the SIGTERM; its elastic agent sends it on to both workers, which save step 17 as above "
     "(by hand: torchrun logs 'Sending process N closing signal SIGTERM'; preempt_job.truth.md)"),
    ("preempt_launcher", "preemption -p grace=5 -p target=launcher", "PASSED", "last-good",
     "the shell starts the trainer without exec and dies of the SIGTERM; the trainer never gets it, saves nothing "
     "(signal-missed-ranks) and is killed with the job: the resume takes step 8's atomic last.pt"),
]
"""Rows of ``SIGNAL_JOBS``, each under ``preemption``."""

FRAMEWORK_ROWS: List[Tuple[str, str, str, str, str]] = [
    ("hf_trainer", "kill9-mid-save", "FAILED", "crashed, resume-chose-incomplete",
     "resume_from_checkpoint=True takes checkpoint-8, left without trainer_state.json, over complete checkpoint-4"),
    ("hf_trainer_robust", "kill9-mid-save", "PASSED", "last-good",
     "resumes from the newest checkpoint-N/ holding trainer_state.json (written last)"),
    ("accelerate", "kill9-mid-save", "FAILED", "crashed, rotation-before-complete",
     "total_limit=1 deletes checkpoint_0 before checkpoint_1 is written; load_state() takes the torn one"),
    ("accelerate_robust", "kill9-mid-save", "PASSED", "last-good",
     "total_limit=2 keeps checkpoint_0; resumes from the newest folder holding its last file"),
    ("accelerate_eval", "kill9-mid-save", "FAILED", "last-good, rng-captured-early",
     "save_state() captures the RNG state before the evaluation's shuffled loader draws from it; load_state() "
     "restores it exactly, so the resumed steps' dropout masks differ (and skip_first_batches' new iterator draws "
     "from it on resume: rng-drawn-after-restore too)"),
    ("accelerate_eval_robust", "kill9-mid-save", "PASSED", "last-good",
     "evaluates before save_state(), and the training DataLoader has its own generator, so the iterator made on "
     "resume draws nothing from torch's stream"),
    ("dcp", "kill9-mid-save", "FAILED", "crashed, resume-chose-dcp-without-metadata",
     "the resume takes step_8/, which the killed dcp.save left without .metadata, over complete step_4/"),
    ("dcp", "kill9-mid-save -p file=.metadata.tmp", "FAILED", "crashed, resume-chose-dcp-without-metadata",
     "the kill lands halfway through rank 0's .metadata.tmp, before its rename: step_8/ has shards and no .metadata, "
     "and the resume takes it"),
    ("dcp_robust", "kill9-mid-save", "PASSED", "last-good",
     "resumes from the newest folder holding .metadata; get_state_dict's lr-0 step is not a training step"),
    ("dcp_async", "kill9-mid-save", "FAILED", "crashed, rotation-before-complete",
     "deletes step_4/ as soon as async_save of step 8 returns; the resume takes step_8/, left without .metadata "
     "(dcp_async_job.truth.md)"),
    ("dcp_async", "power-loss", "PASSED", "last-good",
     "DCP fsyncs each shard and .metadata before its rename: under the ordered model a completed save survives"),
    ("dcp_async", "enospc", "FAILED", "survived, background-error-unobserved",
     "the background write's CheckpointException is never raised (futures.wait); step_4/ was already deleted, so "
     "no complete checkpoint existed until step 12's save ended"),
    ("dcp_async_robust", "kill9-mid-save", "PASSED", "last-good",
     "waits on the previous save's future before rotating; resumes from the newest folder holding .metadata"),
    ("dcp_async_robust", "power-loss", "PASSED", "last-good",
     "shards and .metadata fsynced, rename in order (ordered model); the resume skips a folder without .metadata"),
    ("dcp_async_robust", "enospc", "PASSED", "last-good",
     "future.result() raises the CheckpointException before the next save: exit 1 with step_4/ whole"),
    ("dcp_async_process_robust", "kill9-mid-save", "PASSED", "last-good",
     "DCP's helper process writes the shards and .metadata; killed with the tree, step_8/ has no .metadata and "
     "the resume takes step_4/ (a helper spared by the kill finishes step_8 on its own: dcp_async_job.truth.md)"),
    ("dcp_async_process_robust", "power-loss", "PASSED", "last-good",
     "the helper fsyncs each shard and .metadata before its rename, as the thread does"),
    ("dcp_async_process_robust", "enospc", "PASSED", "last-good",
     "the helper's ENOSPC comes back through the pipe: future.result() raises it, exit 1 with step_4/ whole"),
]
"""The framework verdict table (``--frameworks``): the Hugging Face Trainer, Accelerate and DCP (dcp.save and
dcp.async_save), each on its default checkpointing and on one robust configuration."""


def cause(trial: Dict, every: bool = False) -> str:
    """What decided the verdict: the outcome, and for a failure the first finding that explains it (``every``:
    each that does, joined by `` + ``, for the rows whose job has two defects at once)."""
    if trial["status"] == "inconclusive":
        return f"inconclusive: {trial.get('reason')}"
    if trial.get("sweep") is not None:
        return sweep_cause(trial)
    outcome = trial.get("outcome") or "none"
    if trial["status"] == "passed":
        return outcome
    kinds = [f["kind"] for f in trial["findings"]]
    why = [k for k in EXPLAINING if k in kinds][:None if every else 1]
    return f"{outcome}, {' + '.join(why)}" if why else outcome


def sweep_cause(trial: Dict) -> str:
    """What decided a sweep: the first resumed crash point whose resume failed (did not start from the last good
    checkpoint, or diverged), and after which operation; else that every class resumed as last-good."""
    bad = first_failed(trial["sweep"])
    if bad is not None:
        return f"{bad['outcome'].split(':')[0]} after {bad['operation']}"
    return "last-good in every class" if trial["status"] == "passed" else "a crash state holds no loadable file"


def scenario_args(scenario: str) -> List[str]:
    """A row's scenario as ``chaosckpt run`` arguments: its name, then the ``-p KEY=VALUE`` parameters a row may
    carry after it (``enospc -p free_bytes=0``: a second row of a job under one scenario)."""
    name, *params = scenario.split(" -p ")
    return ["-s", name, *(arg for param in params for arg in ("-p", param))]


def run_row(job: Job, scenario: str, scratch: Path, sweep: bool = False, every: bool = False) -> Tuple[str, str, str]:
    """Run one trial (``sweep``: with ``--sweep``); (verdict, cause, headline), the cause with every explaining
    finding when ``every``."""
    folder = scratch / "project"
    shutil.rmtree(scratch, ignore_errors=True)
    folder.mkdir(parents=True)
    script = "train" + Path(job.path).suffix
    shutil.copy(REPO / job.path, folder / script)
    for path in job.beside:
        shutil.copy(REPO / path, folder / Path(path).name)
    argv = [sys.executable, "-m", "chaosckpt", "run", script, *scenario_args(scenario), "--json", "--out",
            str(scratch / "results"), "--timeout", "300"]
    if job.nproc > 1:
        argv += ["--nproc", str(job.nproc)]
    if sweep:
        argv.append("--sweep")
    argv += ["--", *job.args]
    proc = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=1200)
    try:
        trial = json.loads(proc.stdout)["trials"][0]
    except (ValueError, KeyError, IndexError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return "REFUSED" if proc.returncode == 2 else "ERROR", f"exit {proc.returncode}", tail
    return trial["status"].upper(), cause(trial, every), trial["headline"]


def markdown(results: List[Dict]) -> List[str]:
    lines = ["| job | scenario | expected | got | right | why |", "|---|---|---|---|---|---|"]
    for r in results:
        expected = f"{r['expected']}: {r['expected_cause']}"
        got = f"{r['got']}: {r['got_cause']}"
        lines.append(f"| {r['job']} | {r['scenario']} | {expected} | {got} | {'yes' if r['right'] else '**no**'} | "
                     f"{r['why']} |")
    right = sum(r["right"] for r in results)
    lines.append("")
    lines.append(f"{right} of {len(results)} rows right.")
    return lines


def shown(scenario: str, sweep: bool) -> str:
    return f"{scenario} (sweep)" if sweep else scenario


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run only rows whose job or scenario contains this text")
    parser.add_argument("--markdown", type=Path, help="also write the Markdown table to this file")
    parser.add_argument("--frameworks", action="store_true", help="the framework table (Trainer, Accelerate, DCP)")
    args = parser.parse_args(argv)
    jobs = FRAMEWORK_JOBS if args.frameworks else {**JOBS, **SWEEP_JOBS, **SIGNAL_JOBS}
    table = [(*r, False) for r in FRAMEWORK_ROWS] if args.frameworks else [
        *[(*r, False) for r in ROWS], *[(*r, True) for r in SWEEP_ROWS], *[(*r, False) for r in SIGNAL_ROWS]]
    rows = [r for r in table if args.only in r[0] or args.only in shown(r[1], r[5]) or args.only in jobs[r[0]].path]
    results = []
    with tempfile.TemporaryDirectory(prefix="verdict-table-") as tmp:
        for index, (key, scenario, expected, expected_cause, why, sweep) in enumerate(rows):
            job = jobs[key]
            started = time.monotonic()
            every = " + " in expected_cause or expected_cause.endswith(ONLY)
            got, got_cause, headline = run_row(job, scenario, Path(tmp) / str(index), sweep, every)
            right = got == expected and got_cause == expected_cause.removesuffix(ONLY)
            scenario = shown(scenario, sweep)
            results.append({"job": job.name, "scenario": scenario, "expected": expected,
                            "expected_cause": expected_cause, "got": got, "got_cause": got_cause, "right": right,
                            "why": why, "headline": headline})
            print(f"[{index + 1}/{len(rows)}] {job.name} x {scenario}: expected {expected} ({expected_cause}), got "
                  f"{got} ({got_cause}) in {time.monotonic() - started:.0f} s{'' if right else '  <-- WRONG'}",
                  file=sys.stderr, flush=True)
            if not right:
                print(f"    {headline}", file=sys.stderr, flush=True)
    lines = markdown(results)
    print("\n".join(lines))
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")
    return 0 if all(r["right"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
