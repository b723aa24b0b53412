"""The dry-run never changes a file of yours, whatever the path (issue 30, item 1): every
write, append, truncate, delete, rename and mkdir of every rank goes to that rank's own view,
which reads back what it changed, and barriers hand the changes to the other ranks."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch
from cli_server import run_commlint

HERE = Path(__file__).resolve().parent
ROOT = str(HERE.parent.parent)

# Given an absolute folder and a `../` folder on its command line, like a user would: each
# rank writes, appends, truncates, removes, renames and makes folders there, then checks that
# it reads back what it did. Every check that holds keeps the ranks' communication alike; one
# that fails on a rank makes it broadcast from itself where the others all-reduce (a
# mismatch, so a wrong view can never pass). Then rank 0 writes a file, removes one and
# makes a folder before a barrier, and what rank 1 finds after it decides its communication.
PROGRAM = """\
import glob, os, pathlib, shutil, sys
import numpy as np
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
root, rel = sys.argv[sys.argv.index("--root") + 1], sys.argv[sys.argv.index("--side") + 1]
failed = []

def check(what, ok):
    if not ok:
        failed.append(what)

def read(path, mode="r"):
    with open(path, mode) as fh:
        return fh.read()

ckpt = os.path.join(root, "ckpt.pt")
if rank == 0:  # the checkpoint a real run would overwrite
    torch.save({"step": 7, "w": torch.zeros(4)}, ckpt)
    check("torch.save", torch.load(ckpt)["step"] == 7)
else:
    check("other rank's save unseen", torch.load(ckpt)["step"] == 1)
with open(os.path.join(root, f"new{rank}.txt"), "w") as fh:
    fh.write("hello")
check("open w", read(os.path.join(root, f"new{rank}.txt")) == "hello")
pathlib.Path(rel, f"p{rank}.txt").write_text("xxxxx")
check("write_text", pathlib.Path(rel, f"p{rank}.txt").read_text() == "xxxxx")
with open(os.path.join(root, "log.txt"), "a") as fh:
    fh.write("more\\n")
check("append", read(os.path.join(root, "log.txt")) == "first\\nmore\\n")
os.truncate(os.path.join(root, "trunc.bin"), 2)
check("truncate", read(os.path.join(root, "trunc.bin"), "rb") == b"ab")
check("truncate size", os.path.getsize(os.path.join(root, "trunc.bin")) == 2)
os.remove(os.path.join(root, "data.txt"))
check("remove", not os.path.exists(os.path.join(root, "data.txt")))
try:
    read(os.path.join(root, "data.txt"))
    check("open removed", False)
except FileNotFoundError:
    pass
shutil.rmtree(os.path.join(root, "olddir"))
check("rmtree", not os.path.isdir(os.path.join(root, "olddir")))
check("rmtree listing", "olddir" not in os.listdir(root))
os.replace(os.path.join(root, "a.txt"), os.path.join(root, "b.txt"))
check("replace", read(os.path.join(root, "b.txt")) == "A")
check("replaced", not os.path.exists(os.path.join(root, "a.txt")))
os.rename(os.path.join(rel, "side.txt"), os.path.join(rel, "moved.txt"))
check("rename", read(os.path.join(rel, "moved.txt")) == "S" and "side.txt" not in os.listdir(rel))
os.rename(os.path.join(root, "keepdir"), os.path.join(root, "keepdir2"))
check("rename folder", os.listdir(os.path.join(root, "keepdir2")) == ["inner.txt"])
check("renamed folder's file", read(os.path.join(root, "keepdir2", "inner.txt")) == "I")
os.makedirs(os.path.join(root, "made", "deep"))
np.save(os.path.join(root, "made", "deep", "arr.npy"), np.arange(3))
check("makedirs", os.path.isdir(os.path.join(root, "made", "deep")))
check("numpy.save", np.load(os.path.join(root, "made", "deep", "arr.npy")).tolist() == [0, 1, 2])
made = glob.glob(os.path.join(root, "made", "*", "*.npy"))
check("glob", made == [os.path.join(root, "made", "deep", "arr.npy")])
check("glob real", glob.glob(os.path.join(root, "*.lock")) == [os.path.join(root, "stale.lock")])
check("glob gone", glob.glob(os.path.join(root, "data.*")) == [])
check("walk", [f for _, _, fs in os.walk(os.path.join(root, "made")) for f in fs] == ["arr.npy"])
p = pathlib.Path(root, "touched")
p.touch()
check("touch", p.exists())
p.unlink()
check("unlink", not p.exists())
pathlib.Path(rel, "pdir").mkdir()
pathlib.Path(rel, "pdir", "f.bin").write_bytes(b"01")
pathlib.Path(rel, "pdir", "f.bin").rename(pathlib.Path(rel, "pdir", "g.bin"))
check("pathlib", sorted(x.name for x in pathlib.Path(rel, "pdir").iterdir()) == ["g.bin"])
print("failed:", failed)
t = torch.ones(4)
if failed:
    dist.broadcast(t, src=rank)
else:
    dist.all_reduce(t)

if rank == 0:  # main process first: rank 0 writes the size, removes the lock
    with open(os.path.join(root, "size.txt"), "w") as fh:
        fh.write("8")
    os.remove(os.path.join(root, "stale.lock"))
    os.mkdir(os.path.join(root, "ready"))
dist.barrier()
size = int(read(os.path.join(root, "size.txt")))
dist.all_reduce(torch.ones(size))
if os.path.exists(os.path.join(root, "stale.lock")):
    dist.barrier()
if not os.path.isdir(os.path.join(root, "ready")):
    dist.barrier()
"""


def _user_tree(base: Path) -> None:
    out, side = base / "out", base / "side"
    (out / "olddir" / "sub").mkdir(parents=True)
    (out / "olddir" / "sub" / "x.txt").write_text("old")
    (out / "keepdir").mkdir()
    (out / "keepdir" / "inner.txt").write_text("I")
    torch.save({"step": 1, "w": torch.ones(4)}, out / "ckpt.pt")
    for name, text in {
        "log.txt": "first\n",
        "trunc.bin": "abcdef",
        "data.txt": "data",
        "a.txt": "A",
        "b.txt": "B",
        "size.txt": "3",
        "stale.lock": "",
    }.items():
        (out / name).write_text(text)
    (out / "log.txt").chmod(0o640)
    side.mkdir()
    (side / "side.txt").write_text("S")


def _snapshot(base: Path) -> dict[str, tuple]:
    """Every file and folder under `base`: its mode and modification time, and a file's hash."""
    seen = {}
    for path in sorted([base, *base.rglob("*")]):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        seen[str(path.relative_to(base))] = (st.st_mode, st.st_mtime_ns, digest)
    return seen


@pytest.mark.parametrize("layers", ["python", "python+os"])
def test_a_dry_run_leaves_every_file_of_yours_as_it_was(tmp_path: Path, layers: str):
    """With the Python layer alone (no right to mount), and with the OS layer under it."""
    _user_tree(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(PROGRAM)
    before = _snapshot(tmp_path)
    cmd = ["run", "--nproc-per-node", "2", "--tee", "all"]
    args = ["train.py", "--root", str(tmp_path / "out"), "--side", "../side"]
    env = {**os.environ, "PYTHONPATH": ROOT, "COMMLINT_OVERLAY": "1" if "os" in layers else "0"}
    out = run_commlint([*cmd, *args], timeout=600, cwd=work, env=env)
    assert _snapshot(tmp_path) == before  # byte for byte, mode, time, listing
    # every rank read back what it did, and rank 1 got what rank 0 wrote before the barrier
    assert "[rank 0]: failed: []" in out.stderr and "[rank 1]: failed: []" in out.stderr, (
        out.stderr[-3000:]
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "All checks passed" in out.stdout


C_WRITER = """\
import ctypes, sys
import torch, torch.distributed as dist

dist.init_process_group("gloo")
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fputs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
f = libc.fopen(sys.argv[1].encode(), b"w")  # past Python's open: C code writing a file
libc.fputs(b"from C", f)
libc.fclose(f)
libc.mkdir(sys.argv[2].encode(), 0o755)
with open(sys.argv[1]) as fh:
    dist.all_reduce(torch.ones(len(fh.read())))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the OS layer needs the right to mount")
def test_code_that_writes_from_c_writes_into_the_ranks_overlay(tmp_path: Path):
    (tmp_path / "real.txt").write_text("mine")
    (tmp_path / "prog.py").write_text(C_WRITER)
    before = _snapshot(tmp_path)
    cmd = ["run", "--nproc-per-node", "2", "--format", "json"]
    args = ["prog.py", str(tmp_path / "real.txt"), str(tmp_path / "cdir")]
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = run_commlint([*cmd, *args], timeout=600, cwd=tmp_path, env=env)
    assert _snapshot(tmp_path) == before
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    trace = json.loads(out.stdout)
    assert trace["findings"] == []
