"""Tests of transformer_lib.files (issue 26): the atomic write never writes through a planted file
or link, gives a new file the umask's permissions, names the file when a write fails (a full disk, a file-size
limit), and removes what killed writes left."""
from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_model

from transformer_lib.files import atomic_write, current_umask
from transformer_lib.training.checkpoint import load_checkpoint, save_checkpoint

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("planted", ["out.json.tmp{pid}", ".out.json.tmp"])     # this process's old name, a fixed one
def test_a_link_planted_at_a_temporary_name_is_never_written_through(tmp_path, planted):
    planted = planted.format(pid=os.getpid())
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / planted).symlink_to(victim)
    atomic_write(tmp_path / "out.json", '{"steps": 3}\n')
    assert victim.read_text() == "precious"
    assert (tmp_path / "out.json").read_text() == '{"steps": 3}\n'
    assert not (tmp_path / "out.json").is_symlink()


def test_two_writes_of_one_process_use_different_temporaries(tmp_path, monkeypatch):
    seen = []
    for i in range(2):
        atomic_write(tmp_path / "f.bin", lambda tmp, i=i: (seen.append(tmp), Path(tmp).write_bytes(bytes([i]))))
    assert seen[0] != seen[1] and (tmp_path / "f.bin").read_bytes() == b"\x01"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_every_file_gets_the_permissions_of_a_new_file(tmp_path):
    expected = 0o666 & ~current_umask()
    atomic_write(tmp_path / "a.txt", "text")
    atomic_write(tmp_path / "b.safetensors", lambda tmp: save_model(torch.nn.Linear(2, 2), tmp))
    save_checkpoint(tmp_path / "c.pt", torch.nn.Linear(2, 2), step=1)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"a.txt": expected, "b.safetensors": expected, "c.pt": expected}


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
def test_a_full_disk_is_one_line_naming_the_file_and_what_to_do(tmp_path, code):
    path = tmp_path / "model.bin"
    path.write_bytes(b"old")

    def fill(tmp):
        Path(tmp).write_bytes(b"half")
        raise OSError(code, os.strerror(code))

    with pytest.raises(OSError) as info:
        atomic_write(path, fill)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: could not write it ({os.strerror(code)})")
    assert "Free some space" in message and f"the file at {path} was left as it was" in message
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]


def test_a_folder_that_cannot_be_written_is_not_called_a_full_disk(tmp_path):
    def refuse(tmp):
        raise PermissionError(errno.EACCES, "Permission denied")

    with pytest.raises(OSError, match=r"could not write it \(Permission denied\); the file at") as info:
        atomic_write(tmp_path / "x", refuse)
    assert "disk full" not in str(info.value)


_LIMITED = """
import resource, sys, torch
sys.path.insert(0, {root!r})
from transformer_lib.training.checkpoint import save_checkpoint
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
try:
    save_checkpoint({path!r}, torch.nn.Linear(400, 400), step=2)
except OSError as exc:
    print(exc)
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE as a full disk")
def test_a_checkpoint_that_does_not_fit_names_the_file_not_torchs_internals(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, torch.nn.Linear(2, 2), step=1)
    out = subprocess.run([sys.executable, "-c", _LIMITED.format(root=str(ROOT), path=str(path))],
                         capture_output=True, text=True, timeout=120)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: could not write it (")
    assert "disk full" in lines[0] and "inline_container" not in lines[0]
    assert load_checkpoint(path)["step"] == 1                    # the old checkpoint is whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_a_stale_private_folder_of_a_killed_write_is_removed_and_a_live_one_kept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"c.pt.tmp{dead.pid}.ab_12x"
    stale.mkdir()
    (stale / "c.pt").write_bytes(b"half")
    alive = tmp_path / f"c.pt.tmp{os.getppid()}.zz9"
    alive.mkdir()
    atomic_write(tmp_path / "c.pt", b"whole")
    assert not stale.exists() and alive.is_dir()
