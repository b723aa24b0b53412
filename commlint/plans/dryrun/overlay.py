"""The OS layer of a rank's file view: a private mount namespace whose every disk is an overlay.

`files.FileView` keeps a rank's writes out of your tree for everything Python's `os`, `io`,
`shutil` and `pathlib` do. Code that writes without them (a C extension opening a path itself)
would still reach the disk; where the machine allows it, each rank therefore runs in a mount
namespace of its own in which every mounted disk is an overlay whose upper layer is a memory
file system that goes with the rank: what such code writes lands there, never on disk.

It needs the right to mount (root, or CAP_SYS_ADMIN: a container run as root, a CI runner).
An unprivileged user namespace cannot overlay the root file system (the kernel refuses to
clone a lower layer that has locked mounts under it), so a user without that right gets the
Python layer alone; docs/dryrun.md says what that covers.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 4096, 16384, 1 << 18
# file systems that are not files of the user's: passed through as they are
_PSEUDO = {
    "proc", "sysfs", "devtmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "securityfs",
    "debugfs", "tracefs", "bpf", "pstore", "configfs", "fusectl", "hugetlbfs", "binfmt_misc",
    "autofs", "efivarfs", "rpc_pipefs", "nsfs", "selinuxfs",
}  # fmt: skip


def _mounts() -> list[tuple[str, str, bool]]:
    """(mount point, file system type, read-only) of every mount, parents first."""
    found = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            dash = fields.index("-")
            point = fields[4].encode().decode("unicode_escape")
            found.append((point, fields[dash + 1], "ro" in fields[5].split(",")))
    return found


def _passed_through(point: str, fstype: str, readonly: bool) -> bool:
    return (
        fstype in _PSEUDO
        or readonly
        or point.startswith(("/proc/", "/sys/", "/dev/"))
        or point in ("/proc", "/sys", "/dev")
        or not os.path.isdir(point)
    )


def enter_private_root(scratch: str) -> bool:
    """Move this process (single-threaded, just forked) into a mount namespace where every
    disk is an overlay over a memory file system, and the run's `scratch` folder stays the
    real one. False (and nothing changed that matters) where the machine does not allow it."""
    if os.environ.get("COMMLINT_OVERLAY") == "0" or os.geteuid() != 0:
        return False
    if not os.path.isdir(scratch):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False

    def mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
        rc = libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        )
        if rc != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), target)

    if libc.unshare(_CLONE_NEWNS) != 0:
        return False
    try:
        mount("none", "/", None, _MS_REC | _MS_PRIVATE)
        scratch = os.path.realpath(scratch)
        here = os.path.join(scratch, f"root-{os.getpid()}")
        layers = os.path.join(scratch, f"layers-{os.getpid()}")
        os.mkdir(here, 0o700)
        os.mkdir(layers, 0o700)
        mount("tmpfs", layers, "tmpfs", 0, "mode=700")
        for n, (point, fstype, readonly) in enumerate(_mounts()):
            if point.startswith((scratch + os.sep, layers)) or point == scratch:
                continue
            target = here + point.rstrip("/") if point != "/" else here
            if point != "/" and _passed_through(point, fstype, readonly):
                if os.path.exists(target):
                    mount(point, target, None, _MS_BIND)
                continue
            upper, work = os.path.join(layers, f"u{n}"), os.path.join(layers, f"w{n}")
            os.mkdir(upper)
            os.mkdir(work)
            options = f"lowerdir={point},upperdir={upper},workdir={work}"
            mount("overlay", target, "overlay", 0, options)
        mount(scratch, here + scratch, None, _MS_BIND)
    except OSError:
        return False  # this namespace is private: what was mounted in it goes with it
    cwd = os.getcwd()
    os.chdir(here)
    os.chroot(".")
    with contextlib.suppress(OSError):
        os.chdir(cwd)
    return True
