"""Pickle bombs against ``chaosckpt audit``: each built here, shaped like the attack, and audited within bounds.

Memory is measured with tracemalloc (every Python allocation, the unpickler's included) in this process, or as
the peak resident size of a real ``chaosckpt audit`` process against the same command on a harmless file.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import time
import tracemalloc

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
    assert [f["kind"] for f in report["findings"]] == ["unsafe-pickle", "pickled-objects", "unreadable-checkpoint"]
    assert f"more than {audit.NAMES_MAX} distinct globals" in report["findings"][-1]["message"]
    assert len(report["findings"][1]["message"]) < 1000


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
