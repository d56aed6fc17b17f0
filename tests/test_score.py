"""The scorer on hand-made event logs: recovery outcomes, trajectory comparison, random streams."""

from __future__ import annotations

from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog, Save
from chaosckpt.conductor.trial import compare, rng_capture


def step(n, loss, pfp=None, rng=None, digest=None, psum=None):
    e = {"step": n, "ts": float(n), "loss": [loss], "pfp": pfp or f"p{loss}", "psum": psum if psum is not None else loss,
         "rng": rng or {"torch": f"t{n}", "python": "const"}}
    if digest:
        e["digest"] = digest
    return e


def run_with(steps, saves=()):
    log = ProcessLog(pid=1, steps=list(steps))
    for i, (at, digest) in enumerate(saves, 1):
        log.saves.append(Save(index=i, step=at, path="/w/ckpt.pt", digest=digest, ts=float(i), ok=True))
    return log


REFERENCE = run_with([step(i, float(i), digest="d0" if i == 1 else None) for i in range(1, 31)],
                     saves=[(10, "d10"), (20, "d20"), (30, "d30")])
TABLE = compare.digest_table(REFERENCE)


def resumed(first_digest, start, losses=None):
    losses = losses or [float(i) for i in range(start + 1, 31)]
    steps = [step(i + 1, l, rng={"torch": f"t{start + i + 1}", "python": "const"}) for i, l in enumerate(losses)]
    steps[0]["digest"] = first_digest
    return RunLog([run_with(steps)])


def test_digest_table_maps_saves_and_the_initial_state():
    assert TABLE == {"d0": 0, "d10": 10, "d20": 20, "d30": 30}


def test_recovery_outcomes():
    assert compare.recovery(resumed("d20", 20), 0, "", 20, TABLE).outcome == "last-good"
    older = compare.recovery(resumed("d10", 10), 0, "", 20, TABLE)
    assert (older.outcome, older.recovered_step) == ("older", 10)
    assert compare.recovery(resumed("d0", 0), 0, "", 20, TABLE).outcome == "scratch"
    assert compare.recovery(resumed("elsewhere", 20), 0, "", 20, TABLE).outcome == "unknown-state"


def test_a_resume_that_never_stepped_crashed_with_the_load_error():
    log = ProcessLog(pid=2, loads=[{"path": "/w/ckpt.pt", "ok": False, "error": "RuntimeError: failed finding central directory"}])
    rec = compare.recovery(RunLog([log]), 1, "last stderr line", 20, TABLE)
    assert (rec.outcome, rec.error_path) == ("crashed", "/w/ckpt.pt")
    assert "central directory" in rec.error
    bare = compare.recovery(RunLog([]), 1, "ImportError: no module", 20, TABLE)
    assert (bare.outcome, bare.error) == ("crashed", "ImportError: no module")


def test_identical_trajectory_is_reproduced():
    traj = compare.trajectory(REFERENCE, resumed("d20", 20).trainer(), 20, 0.0)
    assert traj.reproduced and traj.compared == 10 and traj.max_loss_diff == 0.0 and traj.findings == []


def test_first_divergent_step_and_largest_difference():
    losses = [float(i) for i in range(21, 31)]
    losses[3] += 0.25
    losses[6] += 0.5
    traj = compare.trajectory(REFERENCE, resumed("d20", 20, losses).trainer(), 20, 0.0)
    assert not traj.reproduced
    assert traj.first_divergent_step == 24 and traj.max_loss_diff == 0.5


def test_tolerance_accepts_small_relative_differences_only():
    losses = [float(i) * (1 + 1e-7) for i in range(21, 31)]
    log = resumed("d20", 20, losses).trainer()
    for s in log.steps:
        s["psum"] = s["loss"][0]
    assert not compare.trajectory(REFERENCE, log, 20, 0.0).reproduced
    assert compare.trajectory(REFERENCE, log, 20, 1e-6).reproduced
    assert not compare.trajectory(REFERENCE, log, 20, 1e-9).reproduced


def test_a_resume_that_runs_longer_does_not_reproduce():
    log = resumed("d20", 20, [float(i) for i in range(21, 31)] + [99.0])
    traj = compare.trajectory(REFERENCE, log.trainer(), 20, 0.0)
    assert not traj.reproduced and traj.first_divergent_step == 31
    assert [f.kind for f in traj.findings] == ["step-count-differs"]


def test_only_streams_the_loop_draws_from_are_reported():
    log = resumed("d20", 20, [float(i) + 1 for i in range(21, 31)]).trainer()
    log.steps[0]["rng"] = {"torch": "wrong", "python": "also-different"}
    findings = compare.trajectory(REFERENCE, log, 20, 0.0).findings
    assert [(f.kind, f.details["stream"]) for f in findings] == [("rng-not-restored", "torch")]


def test_baseline_divergence():
    same = run_with([step(i, float(i)) for i in range(1, 16)])
    assert compare.baseline_divergence(same, REFERENCE, 0.0) is None
    other = run_with([step(i, float(i) + (i >= 5)) for i in range(1, 16)])
    assert compare.baseline_divergence(other, REFERENCE, 0.0) == 5


def test_fault_point_is_the_step_of_the_interrupted_save():
    log = run_with([step(i, float(i)) for i in range(1, 21)], saves=[(10, "a"), (20, "b")])
    log.saves[1].ok = None
    log.fault = {"save": 2, "ts": 3.0}
    proc, at = compare.fault_point(RunLog([run_with([]), log]))
    assert proc is log and at == 20



def _restored_as_saved(resumed_fetch=None, reference_fetch=None, rng_restored=True, passes=(), first_loader="l-res"):
    """A reference that saved at step 20 with torch at "t-saved" and its loader generator at "l-saved", and a
    resume from that save whose restores left torch at "t-saved"; ``*_fetch``: torch's state when each run's next
    step fetched its first batch; ``passes``: (run, sampler size, step, ts) of DataLoader passes."""
    ref = run_with([step(i, float(i), digest="d0" if i == 1 else None,
                         rng={"torch": f"t{i}", "python": "const", "loader": f"l{i}"}) for i in range(1, 31)],
                   saves=[(10, "d10"), (20, "d20"), (30, "d30")])
    ref.saves[1].rng = {"torch": "t-saved", "python": "const", "loader": "l-saved"}
    log = resumed("d20", 20, [float(i) + 1 for i in range(21, 31)]).trainer()
    log.steps[0]["rng"] = {"torch": "t-resumed", "python": "const", "loader": first_loader}
    if resumed_fetch:
        log.steps[0]["rng_fetch"] = {"torch": resumed_fetch}
    if reference_fetch:
        ref.steps[20]["rng_fetch"] = {"torch": reference_fetch}
    if rng_restored:
        log.restores = [{"what": "torch-rng", "rng": {"torch": "t-other", "python": "const"}},
                        {"what": "python-rng", "rng": {"torch": "t-saved", "python": "const"}}]
    for run, size, at, ts in passes:
        (ref if run == "reference" else log).passes.append({"sampler": "RandomSampler", "size": size, "step": at,
                                                            "ts": ts, "complete": True})
    return [(f.kind, f.details["stream"]) for f in compare.trajectory(ref, log, 20, 0.0).findings]


def test_draws_between_the_capture_and_the_next_step_are_told_by_which_run_made_them():
    # the resumed run's state at its first batch is still the saved one: the uninterrupted run drew after its save
    assert _restored_as_saved(resumed_fetch="t-saved", reference_fetch="t-eval") == [
        ("rng-not-restored", "loader"), ("rng-captured-early", "torch")]
    # the uninterrupted run's is: the resumed run drew after its restore (a new iterator on resume)
    assert _restored_as_saved(resumed_fetch="t-iter", reference_fetch="t-saved")[1:] == [
        ("rng-drawn-after-restore", "torch")]
    # both moved (a new epoch's iterator in both runs): the passes each began in between tell
    evaluation = [("reference", 64, 20, 5.0), ("reference", 256, 20, 9.0), ("resume", 256, 0, 9.0)]
    assert _restored_as_saved("t-iter", "t-eval-iter", passes=evaluation)[1:] == [("rng-captured-early", "torch")]
    skipped = [("reference", 256, 0, 9.0), ("resume", 256, 0, 9.0)]  # a mid-epoch resume's new iterator
    assert _restored_as_saved("t-iter", "t-next", passes=skipped)[1:] == [("rng-drawn-after-restore", "torch")]
    # regression: a private generator equal to the saved one only at the resumed first step was never restored:
    # Lightning's loader generator, seeded anew and drawn once for the resumed epoch, matches by construction
    assert _restored_as_saved("t-saved", "t-eval", first_loader="l-saved") == [
        ("rng-not-restored", "loader"), ("rng-captured-early", "torch")]


def test_without_evidence_or_without_a_restore_a_stream_is_not_restored():
    assert _restored_as_saved("t-iter", "t-eval-iter")[1:] == [("rng-not-restored", "torch")]
    assert _restored_as_saved() == [("rng-not-restored", "loader"), ("rng-not-restored", "torch")]
    assert _restored_as_saved("t-saved", "t-eval", rng_restored=False) == [
        ("rng-not-restored", "loader"), ("rng-not-restored", "torch")]


def test_the_timing_messages_name_the_save_and_the_fix_not_save_and_restore():
    early = rng_capture.message(rng_capture.CAPTURED_EARLY, "torch CPU", 20)
    assert "captured it at the save at step 20" in early and "at step 21 it differs" in early
    assert "right before the next training step" in early
    late = rng_capture.message(rng_capture.DRAWN_AFTER_RESTORE, "torch CPU", 20)
    assert "after the restore and before its first step" in late and "its own generator" in late
    assert "save and restore" not in early + late


def test_rng_states_missing_is_one_finding_naming_every_stream_of_every_save():
    # measured: a shuffled DataLoader with no generator draws torch's stream at each iterator, after the first
    # save; the agent judged save 1 against python alone and saves 2 and 3 against python and torch
    from chaosckpt import checkpoint_content

    def save(index, drawn):
        contents = checkpoint_content.scan({"model": {"w": [1.0]}, "epoch": index})
        return Save(index=index, step=8 * index, path="/w/ckpt/last.pt", digest=f"d{index}", ts=float(index),
                    content=checkpoint_content.findings(contents, streams=drawn))

    log = ProcessLog(pid=1, saves=[save(1, ["python"]), save(2, ["python", "torch"]), save(3, ["python", "torch"])])
    [found] = [f for f in compare.content_findings(log) if f.kind == "rng-states-missing"]
    assert found.details["saves"] == [1, 2, 3] and found.details["streams"] == ["python", "torch"]
    assert found.message.startswith("this checkpoint carries no RNG state; the loop draws from 2 streams (python, "
                                    "torch): ")


def test_a_resume_error_names_the_sandbox_s_files_relative_to_the_job_s_folder(tmp_path):
    # measured: under the strict model a job that loads by absolute path crashed with "FileNotFoundError: [Errno 2]
    # No such file or directory: '/tmp/.../sandboxes/faulted/ckpt/steps/step_16.pt'", and the headline showed it
    from chaosckpt.conductor.trial.context import rel_text

    work = tmp_path / "sandboxes" / "faulted"
    work.mkdir(parents=True)
    (tmp_path / "link").symlink_to(work)
    error = f"FileNotFoundError: [Errno 2] No such file or directory: '{work}/ckpt/steps/step_16.pt'"
    assert rel_text(error, work) == rel_text(error, tmp_path / "link") == (
        "FileNotFoundError: [Errno 2] No such file or directory: 'ckpt/steps/step_16.pt'")
    assert rel_text("EOFError", work) == "EOFError" and rel_text(None, work) is None
