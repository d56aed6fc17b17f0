"""Pickle bombs against ``chaosckpt audit``: each built here, shaped like the attack, and audited within bounds.

Memory is measured with tracemalloc (every Python allocation, the unpickler's included) in this process, or as
the peak resident size of a real ``chaosckpt audit`` process against the same command on a harmless file.
"""

from __future__ import annotations

import json
import signal
import struct
import subprocess
import sys
import time
import tracemalloc

import psutil
import pytest
import torch
from conftest import run_chaosckpt

from chaosckpt.conductor.disk import audit

MB = 1 << 20


def measured(path, **options):
    """``audit_file`` on ``path``: its report, its peak of Python allocations in bytes, its seconds."""
    tracemalloc.start()
    start = time.monotonic()
    try:
        report = audit.audit_file(path, **options)
        return report, tracemalloc.get_traced_memory()[1], time.monotonic() - start
    finally:
        tracemalloc.stop()


def call_flood(count: int) -> bytes:
    """A protocol-2 pickle: a list of ``count`` calls of ``posix.system('echo')``, each 13 bytes."""
    return (b"\x80\x02](cposix\nsystem\nq\x01" + b"h\x01X\x04\x00\x00\x00echo\x85R" * count + b"e.")


def test_back_references_to_one_tensor_cost_what_the_file_holds(tmp_path):
    path = tmp_path / "refs.pt"
    one = torch.zeros(4)
    torch.save([one] * 200_000, path)  # 400 kB: each reference is a memo get of a few bytes
    report, peak, seconds = measured(path)
    assert report["contents"]["tensors"] == 200_000
    assert report["contents"]["bytes"] == 16
    assert report["contents"]["keys_more"] == 200_000 - len(report["contents"]["keys"])
    assert peak < 40 * MB, f"{peak / MB:.0f} MB of Python objects for a {path.stat().st_size / MB:.1f} MB file"
    assert seconds < 60


@pytest.mark.parametrize("opcode", [b"\x8e", b"\x96", b"\x8d", b"\x95"], ids=["BINBYTES8", "BYTEARRAY8",
                                                                             "BINUNICODE8", "FRAME"])
def test_a_record_claiming_gigabytes_is_refused_without_allocating_them(tmp_path, opcode):
    path = tmp_path / "claims.pkl"
    path.write_bytes(b"\x80\x04" + opcode + struct.pack("<Q", 2 << 30) + b"x" * 100 + b".")
    report, peak, _ = measured(path, max_inflate=1 * MB)
    assert peak < 16 * MB, f"{peak / MB:.0f} MB allocated for a {path.stat().st_size}-byte file"
    [finding] = report["findings"]
    assert finding["kind"] == "unreadable-checkpoint"


def test_the_claim_limit_is_the_declared_one(tmp_path):
    path = tmp_path / "big.pkl"
    path.write_bytes(b"\x80\x04\x8e" + struct.pack("<Q", 3 * MB) + b"\0" * (3 * MB) + b".")
    refused, _, _ = measured(path, max_inflate=2 * MB)
    assert "claims more than 2097152 bytes" in refused["findings"][0]["message"]
    allowed, _, _ = measured(path, max_inflate=8 * MB)
    assert allowed["file_format"] == "pickle" and allowed["findings"] == []


def test_bytes_that_only_look_like_a_large_claim_do_not_refuse_a_good_pickle(tmp_path):
    path = tmp_path / "lookalike.pkl"
    path.write_bytes(b"\x80\x02C\x09\x8e" + b"\xff" * 8 + b".")  # SHORT_BINBYTES holding an opcode byte and a claim
    report, _, _ = measured(path)
    assert report["file_format"] == "pickle" and report["findings"] == []


def test_a_call_flood_gives_one_short_finding_that_counts_the_calls(tmp_path):
    path = tmp_path / "flood.pkl"
    path.write_bytes(call_flood(100_000))
    report, peak, _ = measured(path)
    [unsafe] = report["findings"]
    assert unsafe["kind"] == "unsafe-pickle"
    assert "posix.system called 99995 more times" in unsafe["message"]
    assert len(unsafe["message"]) < 1000 and len(unsafe["calls"]) == audit.CALLS_SHOWN + 1
    assert peak < 200 * MB


def test_a_flood_of_distinct_names_is_refused_at_the_cap(tmp_path):
    path = tmp_path / "names.pkl"
    names = b"".join(b"cm%d\nf\n0" % i for i in range(audit.NAMES_MAX + 10))
    path.write_bytes(b"\x80\x02cposix\nsystem\n0" + names + b"N.")
    report = audit.audit_file(path)
    assert [f["kind"] for f in report["findings"]] == ["unsafe-pickle", "unreadable-checkpoint"]
    assert f"more than {audit.NAMES_MAX} distinct globals" in report["findings"][-1]["message"]
    assert len(report["findings"][0]["message"]) < 1000


@pytest.mark.parametrize("protocol", [0, 1])
def test_protocol_0_and_1_pickles_that_run_commands_are_unsafe(tmp_path, protocol):
    path = tmp_path / f"evil{protocol}.pkl"
    path.write_bytes(b"cposix\nsystem\n(S'touch PWNED'\ntR." if protocol == 0
                     else b"cposix\nsystem\n(X\x0b\x00\x00\x00touch PWNEDtR.")
    result = run_chaosckpt(["audit", str(path)], cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "unsafe-pickle: loading this file runs posix.system('touch PWNED')" in result.stdout
    assert not (tmp_path / "PWNED").exists()


def test_the_audit_command_stays_near_its_own_size_on_a_bomb(tmp_path):
    """Peak resident size of ``chaosckpt audit`` on a back-reference bomb, against the same command on a small file."""
    probe = ("import resource, runpy, sys, atexit; atexit.register(lambda: print("
             "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)); "
             "sys.argv = ['chaosckpt', 'audit', sys.argv[1]]; runpy.run_module('chaosckpt', run_name='__main__')")
    torch.save({"w": torch.zeros(4)}, tmp_path / "small.pt")
    torch.save([torch.zeros(4)] * 500_000, tmp_path / "bomb.pt")

    def peak_kb(name):
        proc = subprocess.run([sys.executable, "-c", probe, str(tmp_path / name)], capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        return int(proc.stderr.strip().splitlines()[-1])

    assert peak_kb("bomb.pt") - peak_kb("small.pt") < 100 * 1024


def shared_tuples(levels: int) -> bytes:
    """Opcodes leaving on the stack a tuple of two references to a tuple of two references ... ``levels`` deep:
    a few bytes each, while hashing it (or printing it) visits 2**levels tuples."""
    return b")q\x000" + b"h\x00h\x00\x86q\x000" * levels + b"h\x00"


BOMBS = {
    "hash": b"\x80\x02}" + shared_tuples(60) + b"K\x01s.",  # the tuple as a dict key: hashed by the unpickler
    "frozenset": b"\x80\x02cbuiltins\nfrozenset\n]" + shared_tuples(60) + b"a\x85R.",  # hashed by frozenset()
    "nested": b"\x80\x02" + b"]" * 3_000_000 + b"a" * 2_999_999 + b".",  # 6 MB: a list in a list ... 3 million deep
}
LIMITS = ["--max-seconds", "2", "--max-memory", "256M"]
PEAKS = ("import resource, runpy, sys, atexit; atexit.register(lambda: print(resource.getrusage(resource.RUSAGE_SELF)"
         ".ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)); "
         "sys.argv = ['chaosckpt', *sys.argv[1:]]; runpy.run_module('chaosckpt', run_name='__main__')")
"""Runs ``chaosckpt ARGS`` and prints, last on stderr, its own peak resident kB and its largest child's."""


def test_bombs_are_stopped_at_a_limit_in_one_line_each(tmp_path):
    """One ``audit`` of every bomb (and of a call whose argument would print as 2**40 items, and of a folder holding
    a bomb), at low limits: each ends in one finding, within the limits, and the command goes on to the next."""
    names = []
    for name, data in BOMBS.items():
        (tmp_path / f"{name}.pkl").write_bytes(data)
        names.append(f"{name}.pkl")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.pt").write_bytes(BOMBS["hash"])
    (tmp_path / "repr.pkl").write_bytes(b"\x80\x02cposix\nsystem\n]q\x000" + b"(h\x00h\x00lq\x000" * 40 + b"h\x00\x85R.")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", PEAKS, "audit", *names, "repr.pkl", "ckpt", *LIMITS], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    seconds = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    for name in BOMBS:
        at = lines.index(f"FINDINGS {name}.pkl: not read to its end ({len(BOMBS[name])} bytes)")
        assert lines[at + 1].startswith("  - resource-limit: audit stopped reading it at its ")
        assert any(f"limit ({figure})" in lines[at + 1] for figure in ("2 s", "256 MiB"))
    at = lines.index(f"FINDINGS ckpt/: checkpoint folder, incomplete, 0 files, {len(BOMBS['hash'])} B; 1 finding")
    assert lines[at + 1].startswith("  - resource-limit: audit stopped reading it at its ")
    [shown] = [line for line in lines if "posix.system" in line]
    assert shown.startswith("  - unsafe-pickle: loading this file runs posix.system([[[[...], [...]], ")
    assert len(shown) < 400
    own, reader = (int(n) for n in proc.stderr.splitlines()[-1].split())
    assert reader - own < 300 * 1024, f"a reader grew {(reader - own) // 1024} MB past the command's own size"
    assert seconds < 90


def test_audit_ends_on_sigterm_and_leaves_no_reader_behind(tmp_path):
    """Regression: the hash bomb held the CPU in C for 13 minutes, deaf to SIGTERM."""
    path = tmp_path / "hash.pkl"
    path.write_bytes(BOMBS["hash"])
    proc = subprocess.Popen([sys.executable, "-m", "chaosckpt", "audit", str(path), "--max-seconds", "60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        readers = []
        while not readers and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            readers = psutil.Process(proc.pid).children(recursive=True)
        assert readers, "audit started no reader process"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        gone, alive = psutil.wait_procs(readers, timeout=10)
        assert alive == []
    finally:
        proc.kill()
        proc.wait()


GADGETS = {
    "torch.utils.collect_env.run": b"ctorch.utils.collect_env\nrun\n(S'touch PWNED'\ntR.",
    "uuid._get_command_stdout": b"cuuid\n_get_command_stdout\n(S'touch'\nS'PWNED'\ntR.",
    "_io.open": b"c_io\nopen\n(S'PWNED'\nS'w'\ntR.",
    "codecs.open": b"ccodecs\nopen\n(S'PWNED'\nS'w'\ntR.",
    "_posixsubprocess.fork_exec": b"c_posixsubprocess\nfork_exec\n((S'touch'\nS'PWNED'\nlp0\n(S'/bin/touch'\ntNtR.",
    "_operator.methodcaller": b"c_operator\nmethodcaller\n(S'system'\nS'touch PWNED'\ntR.",
    "torch.fx.graph_module._exec_with_source": (b"ctorch.fx.graph_module\n_exec_with_source\n"
                                                b"(S'open(\"PWNED\", \"w\")'\n(dtR."),
    "numpy.testing._private.utils.runstring": b"cnumpy.testing._private.utils\nrunstring\n(S'open(\"PWNED\", \"w\")'\n(dtR.",
    "__main__.Config": b"\x80\x02c__main__\nConfig\n)\x81}X\x02\x00\x00\x00lrG?\xb9\x99\x99\x99\x99\x99\x9asb.",
}
"""Pickles (protocol 0, written opcode by opcode) that run a command, open a file or run code when loaded, and a
class of the job's own, which audit cannot tell from one that does: none is ever loaded here."""


def test_every_gadget_is_unsafe_whatever_is_ignored(tmp_path):
    names = []
    for index, (callable_name, data) in enumerate(GADGETS.items()):
        (tmp_path / f"g{index}.pkl").write_bytes(data)
        names.append(f"g{index}.pkl")
    result = run_chaosckpt(["audit", "--json", "--ignore", "pickled-objects", *names], cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    files = json.loads(result.stdout)["files"]
    for (callable_name, _), report in zip(GADGETS.items(), files):
        unsafe = [f for f in report["findings"] if f["kind"] == "unsafe-pickle"]
        assert [f["callables"] for f in unsafe] == [[callable_name]], report
    assert not (tmp_path / "PWNED").exists()


def test_the_findings_that_let_a_hostile_file_pass_cannot_be_ignored(tmp_path):
    path = tmp_path / "evil.pkl"
    path.write_bytes(GADGETS["_io.open"])
    for kind in ("unsafe-pickle", "resource-limit"):
        result = run_chaosckpt(["audit", str(path), "--ignore", kind], cwd=tmp_path)
        assert result.returncode == 2 and result.stdout == ""
        [line] = result.stderr.splitlines()
        assert line.startswith(f"chaosckpt: error: --ignore {kind}: not allowed: ")
