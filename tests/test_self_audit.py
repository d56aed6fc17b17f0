"""``audit`` on hostile files: bounded memory and time, every record checked, nothing hangs (issue 16 item 5)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from chaosckpt.conductor.disk import audit


def rezip(src: Path, dest: Path, replace: dict, compress: set) -> None:
    """``src`` (a torch.save archive) written again as ``dest``: some records replaced, some deflated."""
    with zipfile.ZipFile(src) as old, zipfile.ZipFile(dest, "w") as new:
        for info in old.infolist():
            data = replace.get(info.filename.split("/", 1)[1], None)
            data = old.read(info) if data is None else data
            method = zipfile.ZIP_DEFLATED if info.filename.split("/", 1)[1] in compress else zipfile.ZIP_STORED
            new.writestr(zipfile.ZipInfo(info.filename), data, compress_type=method)


def bomb(tmp_path: Path, inflated: int) -> Path:
    torch.save({"step": 1}, tmp_path / "plain.pt")
    payload = b"\x80\x04\x8e" + inflated.to_bytes(8, "little") + bytes(inflated) + b"."
    rezip(tmp_path / "plain.pt", tmp_path / "bomb.pt", {"data.pkl": payload}, {"data.pkl"})
    return tmp_path / "bomb.pt"


def kinds(report: dict) -> list:
    return [f["kind"] for f in report["findings"]]


def test_a_zip_bomb_is_refused_past_the_inflate_limit_and_read_when_the_limit_is_raised(tmp_path):
    path = bomb(tmp_path, 64 << 20)
    assert path.stat().st_size < 1 << 20

    report = audit.audit_file(path)

    assert kinds(report) == ["unreadable-checkpoint"]
    assert "inflates to more than 16777216 bytes" in report["findings"][0]["message"]
    assert "--max-inflate" in report["findings"][0]["message"]
    raised = audit.audit_file(path, max_inflate=128 << 20)
    assert raised["file_format"] == "torch zip archive"


def test_a_damaged_compressed_data_record_is_found(tmp_path):
    torch.save({"w": torch.randn(4096, generator=torch.Generator().manual_seed(0)), "step": 3}, tmp_path / "plain.pt")
    rezip(tmp_path / "plain.pt", tmp_path / "deflated.pt", {}, {"data/0"})
    assert audit.audit_file(tmp_path / "deflated.pt")["findings"] == []
    data = bytearray((tmp_path / "deflated.pt").read_bytes())
    with zipfile.ZipFile(tmp_path / "deflated.pt") as archive:
        info = [i for i in archive.infolist() if i.filename.endswith("data/0")][0]
    middle = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.compress_size // 2
    data[middle] ^= 0xFF
    (tmp_path / "damaged.pt").write_bytes(bytes(data))
    with zipfile.ZipFile(tmp_path / "damaged.pt") as archive, pytest.raises(zipfile.BadZipFile, match="CRC"):
        archive.read(info.filename)  # the damage is real: the record's bytes are not those saved

    report = audit.audit_file(tmp_path / "damaged.pt")

    assert kinds(report) == ["unreadable-checkpoint"]
    assert "data/0 is damaged" in report["findings"][0]["message"]


class _GetattrImport:
    """Pickles as ``getattr(__import__('os'), 'system')('true')``."""

    def __reduce__(self):
        return (getattr(__import__("os"), "system"), ("true",))


def test_a_global_outside_the_allowlist_is_unsafe_even_when_the_call_cannot_be_rebuilt(tmp_path):
    inner = pickle.dumps(_GetattrImport(), protocol=2)
    body = (b"\x80\x02cbuiltins\ngetattr\ncbuiltins\n__import__\nX\x02\x00\x00\x00os\x85R"
            b"X\x06\x00\x00\x00system\x86RX\x04\x00\x00\x00true\x85R.")
    assert b"system" in inner
    path = tmp_path / "sneaky.pt"
    path.write_bytes(body)

    report = audit.audit_file(path)

    assert "unsafe-pickle" in kinds(report)
    unsafe = report["findings"][kinds(report).index("unsafe-pickle")]
    assert set(unsafe["callables"]) == {"builtins.getattr", "builtins.__import__"}


def test_a_deeply_nested_pickle_is_walked_without_recursion(tmp_path):
    depth = 200_000
    path = tmp_path / "deep.pkl"
    path.write_bytes(b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b".")

    report = audit.audit_file(path)

    assert report["file_format"] == "pickle" and report["contents"]["keys"][0]["key"] == "[0]"


def test_a_fifo_is_refused_in_one_line_and_nothing_hangs(tmp_path):
    fifo = tmp_path / "ckpt.pt"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-m", "chaosckpt", "audit", str(fifo)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "is not a regular file" in proc.stderr


def test_a_bad_max_inflate_is_a_usage_error(tmp_path):
    torch.save({"step": 1}, tmp_path / "a.pt")
    proc = subprocess.run([sys.executable, "-m", "chaosckpt", "audit", "--max-inflate", "lots", str(tmp_path / "a.pt")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--max-inflate lots is invalid" in proc.stderr
