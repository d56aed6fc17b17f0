"""The generated jobs of issue 31 (bench/generated): the covering array covers every valid pair of dimension values,
every generated script compiles, and the judge shares no code with chaosckpt. The e2e test judges one job and runs
chaosckpt on it through the agreement runner."""

from __future__ import annotations

import ast
import itertools
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GENERATED = REPO / "bench" / "generated"
sys.path.insert(0, str(GENERATED))

import jobgen  # noqa: E402


def test_covering_array_covers_every_valid_pair_and_only_valid_rows():
    for seed in (0, 1):
        rows = jobgen.covering_array(seed)
        assert all(jobgen.valid(r) for r in rows)
        assert all(set(r) == set(jobgen.DIMENSIONS) for r in rows)
        assert jobgen.covered(rows) >= set(jobgen.valid_pairs())
        # every value of every dimension appears
        for name, values in jobgen.DIMENSIONS.items():
            assert {r[name] for r in rows} == set(values)
        # a covering array, not an enumeration: close to the product of the two largest dimensions
        sizes = sorted(len(v) for v in jobgen.DIMENSIONS.values())
        assert len(rows) <= 2 * sizes[-1] * sizes[-2]


def test_covering_array_is_seeded():
    assert jobgen.covering_array(0) == jobgen.covering_array(0)
    assert jobgen.covering_array(0) != jobgen.covering_array(1)


def test_only_fixed_name_resume_with_other_rotations_and_saver_threads_on_one_name_are_excluded():
    invalid = {(a, b) for a, b in itertools.product(jobgen.DIMENSIONS["resume"], jobgen.DIMENSIONS["rotation"])
               if not jobgen.valid({"resume": a, "rotation": b})}
    assert invalid == {("fixed", r) for r in ("keep2", "delete_before", "delete_after")}
    threads = ("thread_joined", "daemon")
    assert {(a, b) for a, b in itertools.product(jobgen.DIMENSIONS["saver"], jobgen.DIMENSIONS["rotation"])
            if not jobgen.valid({"saver": a, "rotation": b})} == {(t, "overwrite") for t in threads}
    assert {(a, b) for a, b in itertools.product(jobgen.DIMENSIONS["saver"], jobgen.DIMENSIONS["resume"])
            if not jobgen.valid({"saver": a, "resume": b})} == {(t, "fixed") for t in threads}


def test_a_sample_past_the_covering_array_draws_valid_rows_none_twice():
    rows = jobgen.sample(120, 0)
    assert rows[:len(jobgen.covering_array(0))] == jobgen.covering_array(0)
    assert len({jobgen.job_id(r) for r in rows}) == 120 and all(jobgen.valid(r) for r in rows)
    assert rows == jobgen.sample(120, 0)


def test_every_generated_script_compiles_and_names_its_row():
    for row in jobgen.covering_array(0):
        source = jobgen.script(row)
        compile(source, jobgen.job_id(row), "exec")
        assert jobgen.job_id(row) in source
        assert "import chaosckpt" not in source and "from chaosckpt" not in source


def imported(path: Path) -> set:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(("." * node.level) + (node.module or ""))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                "__import__", "import_module"):
            names |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return names


def test_judge_imports_nothing_from_chaosckpt():
    """The judge and the generator it reads import only the standard library, each other, and nothing of chaosckpt
    or of bench/ modules that import it; the agreement runner reaches chaosckpt only through its CLI."""
    stdlib = set(sys.stdlib_module_names)
    for name in ("judge.py", "jobgen.py", "agreement.py", "__init__.py"):
        for module in imported(GENERATED / name):
            top = module.lstrip(".").split(".")[0]
            assert top != "chaosckpt", (name, module)
            assert not module.startswith("."), (name, module)
            assert top in stdlib or top in ("jobgen", "judge"), (name, module)


def test_the_judge_reads_the_saves_from_an_strace_record():
    import judge
    ckpt = Path("/w/job/ckpt")
    log = "\n".join([
        '11 write(1<pipe:[9]>, "step 1 loss 0.5\\n", 16) = 16',
        '11 write(3</w/job/ckpt/last.pt.tmp>, "PK"..., 64) = 64',
        '11 write(3</w/job/ckpt/last.pt.tmp>, "PK"..., 64) = 64',
        '11 write(1<pipe:[9]>, "saved step 1\\n", 13) = 13',
        '11 write(1<pipe:[9]>, "step 2 loss 0.25\\n", 17) = 17',
        '11 write(3</w/job/ckpt/last.pt.tmp>, "PK"..., 64) = 64',
        '11 write(3</w/job/ckpt/last.pt.tmp>, "PK"..., 64) = 64',
        '11 write(3</w/job/ckpt/last.pt.tmp>, "PK"..., 64) = 64',
        '11 write(1<pipe:[9]>, "saved step 2\\n", 13) = 13',
    ])
    saves = judge.saves_in_record(log, ckpt)
    assert [s.step for s in saves] == [1, 2]
    assert judge.place(saves[1]) == ("ckpt/last.pt.tmp", 4)
    # a saver thread (tid 12, then 13) writes while the training thread prints the next step; each thread's writes
    # of a name are counted apart, as strace's when=N counts them
    threaded = "\n".join([
        '11 write(1<pipe:[9]>, "step 2 loss 0.5\\n", 16) = 16',
        '12 write(3</w/job/ckpt/step_2.pt.tmp>, "PK"..., 64) = 64',
        '11 write(1<pipe:[9]>, "step 3 loss 0.4\\n", 16) = 16',
        '12 write(3</w/job/ckpt/step_2.pt.tmp>, "PK"..., 64) = 64',
        '12 write(1<pipe:[9]>, "saved step 2\\n", 13) = 13',
        '11 write(1<pipe:[9]>, "step 4 loss 0.3\\n", 16) = 16',
        '13 write(3</w/job/ckpt/step_4.pt.tmp>, "PK"..., 64) = 64',
        '13 write(3</w/job/ckpt/step_4.pt.tmp>, "PK"..., 64) = 64',
        '11 write(1<pipe:[9]>, "step 5 loss 0.2\\n", 16) = 16',
        '13 write(3</w/job/ckpt/step_4.pt.tmp>, "PK"..., 64) = 64',
        '13 write(1<pipe:[9]>, "saved step 4\\n", 13) = 13',
    ])
    saves = judge.saves_in_record(threaded, ckpt, every=2)
    assert [(s.step, len(s.writes)) for s in saves] == [(2, 2), (4, 3)]
    assert judge.place(saves[1]) == ("ckpt/step_4.pt.tmp", 2)
    p = judge.printed(1, "resumed from step 6\nstep 7 loss 0.1\nsaved step 12\ncannot load ckpt/x.pt: bad\n")
    assert (p.resumed, p.steps, p.saved, p.cannot_load, p.finished) == (6, [(7, "0.1")], [12], ["ckpt/x.pt"], False)


SAMPLE = jobgen.every_value(jobgen.covering_array(0))
"""Rows of the seed-0 covering array that hold every value of every dimension between them."""


def test_the_ci_sample_holds_every_value_of_every_dimension():
    rows = [jobgen.covering_array(0)[i] for i in SAMPLE]
    assert {(n, r[n]) for r in rows for n in jobgen.DIMENSIONS} == {
        (n, v) for n, values in jobgen.DIMENSIONS.items() for v in values}
    assert len(SAMPLE) <= 8


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("strace") is None, reason="the judge needs strace")
@pytest.mark.parametrize("index", SAMPLE)
def test_a_generated_job_judged_and_run_through_chaosckpt_agree(tmp_path, index):
    """A row of the sample under a kill mid-save or a full disk (alternately): the judge and chaosckpt agree on the
    verdict, the outcome, the step recovered, the steps lost and the causes, and chaosckpt passes nothing the judge
    fails. One difference of causes is allowed, the open one the bench documents (bench/generated/README.md): a
    daemon saver's last save at the exit, in flight under the agent where the job's own run lands it. A daemon
    saver's row takes the full disk: under a kill, what its earlier saves' threads had done by then depends on the
    machine's load, which chaosckpt does not pin yet (the same README)."""
    import agreement
    from dataclasses import asdict
    row = jobgen.covering_array(0)[index]
    fault = "enospc" if row["saver"] == "daemon" else ("kill", "enospc")[SAMPLE.index(index) % 2]
    truth, _ = agreement.judge.judge(row, fault, tmp_path / "judge")
    got = agreement.chaosckpt(row, fault, tmp_path / "chaosckpt")
    t = asdict(truth)
    assert not agreement.false_pass(t, got), (t, got)
    agree = agreement.compare(t, got, row)
    assert all(agree[a] for a in agreement.ASPECTS if a != "causes"), (t, got)
    assert set(got["causes"]) ^ set(t["expected_causes"]) <= {"exit-with-save-in-flight"}, (t, got)


def test_the_resume_s_first_batch_tells_steps_replayed_from_skipped():
    """Against the uninterrupted run's batches (each named by the sum of its inputs): the batch of the step after
    the checkpoint is in order; an earlier one replayed, a later one skipped, another epoch's at the same place in
    its epoch an epoch order replayed, one no step trained unseen; data that repeats every epoch is placed by its
    position in the epoch (a counter restarted at 0 replays)."""
    import judge
    shuffled = {k: f"b{k}" for k in range(1, 33)}
    assert [judge.data_position(shuffled, 6, b) for b in ("b7", "b2", "b9", "b15", "b1", "other")] == [
        "in-order", "replayed", "skipped", "order-replayed", "replayed", "unseen"]
    assert judge.data_position(shuffled, 8, "b1") == "order-replayed"  # a new epoch reading epoch 0's order
    cyclic = {k: f"p{(k - 1) % jobgen.EPOCH}" for k in range(1, 33)}
    assert [judge.data_position(cyclic, 6, "p0"), judge.data_position(cyclic, 8, "p0"),
            judge.data_position(cyclic, 3, "p6")] == ["replayed", "in-order", "skipped"]
    assert judge.data_position(shuffled, 6, None) is None


def test_the_judge_names_causes_from_the_dimensions_and_what_the_experiment_showed():
    import judge
    row = dict(jobgen.sample(1, 0)[0])

    def truth(**kw):
        t = judge.Truth("j", kw.pop("fault", "kill"), 2, "")
        for k, v in kw.items():
            setattr(t, k, v)
        return t

    crashed = truth(outcome="crashed", fault_in_final_name=True)
    assert judge.causes({**row, "rotation": "overwrite"}, crashed) == ["in-place-save", "torn-checkpoint"]
    # a new name written in place held no earlier checkpoint: not in-place-save; the resume chose the torn file
    assert judge.causes({**row, "rotation": "keep2", "resume": "newest_by_name"}, crashed) == [
        "resume-chose-incomplete", "torn-checkpoint"]
    scratch = truth(outcome="scratch", recovered_step=0, reproduced=True)
    assert judge.causes({**row, "rotation": "delete_before"}, scratch) == ["rotation-before-complete"]
    diverged = truth(outcome="last-good", recovered_step=8, reproduced=False)
    plain = {**row, "saved": "full", "rng": "all", "data": "slice", "draws": "none", "quirk": "train_after_val"}
    assert judge.causes({**plain, "saved": "no_scheduler"}, diverged) == ["scheduler-not-restored"]
    assert judge.causes({**plain, "draws": "python", "rng": "torch"}, diverged) == ["rng-not-restored"]
    # steps replayed or skipped: where the resume's first batch stood in the uninterrupted run, by experiment
    assert judge.causes({**plain, "data": "counter"}, diverged) == []
    assert judge.causes({**plain, "data": "counter"}, truth(outcome="last-good", recovered_step=6, reproduced=False,
                                                            first_batch="replayed")) == ["steps-replayed"]
    assert judge.causes(plain, truth(outcome="last-good", recovered_step=6, reproduced=False,
                                     first_batch="skipped")) == ["steps-skipped"]
    assert judge.causes({**plain, "quirk": "no_train_after_val"}, truth(outcome="last-good", recovered_step=8,
                                                                        reproduced=True)) == ["eval-mode-in-training"]
    # the model's weights taken from the EMA copy: named where the resume took a checkpoint, not where it survived
    assert judge.causes({**plain, "quirk": "ema_weights"}, diverged) == ["resumed-other-weights"]
    assert judge.causes({**plain, "quirk": "ema_weights"}, truth(fault="enospc", outcome="survived",
                                                                 reproduced=True)) == []
    # worker processes draw their order from the global RNG as the plain loader does; a zero step before the load,
    # which the load overwrites, is no cause
    assert judge.causes({**plain, "data": "workers", "rng": "none"}, diverged) == ["rng-not-restored"]
    assert judge.causes({**plain, "quirk": "step_before_load"}, diverged) == []
    # a save that failed in a thread the training never heard of; a last save the exit stopped
    assert judge.causes(plain, truth(fault="enospc", outcome="survived", reproduced=True,
                                     save_failed_unnoticed=True)) == ["background-error-unobserved"]
    assert judge.causes(plain, truth(outcome="last-good", recovered_step=8, reproduced=True,
                                     final_save_lost=True)) == ["exit-with-save-in-flight"]
