"""Files and directories ackbridge creates: private to the user by default.

Broker files, write-ahead files, checkpoints and demo output hold message
bodies, so other users of the machine must not read them. These helpers
create them owner-only (files 0600, directories 0700) whatever the umask, and
take a wider mode when the caller asks for one (e.g. the embedded broker's
``file_mode`` option). Existing files and directories keep their mode: the
user may have chosen it.

What a process leaves behind is found by its pid: :func:`process_alive` is the one
rule for whether its owner still runs (the embedded broker's leases, the Spark
runner's batch directories).
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700

StrPath = str | os.PathLike[str]


def parse_mode(text: str | int) -> int:
    """A permission mode from ``"600"``, ``"0600"``, ``"0o600"`` or an int; ValueError if it is not one."""
    if isinstance(text, int):
        mode = text
    else:
        digits = text.strip().lower().removeprefix("0o")
        if not digits or any(c not in "01234567" for c in digits):
            raise ValueError(f"{text!r} is not an octal permission mode such as 0600")
        mode = int(digits, 8)
    if not 0 <= mode <= 0o777:
        raise ValueError(f"{oct(mode)} is not a permission mode (0 to 0777)")
    if not mode & 0o600 == 0o600:
        raise ValueError(f"{oct(mode)} does not let the owner read and write")
    return mode


def dir_mode_for(file_mode: int) -> int:
    """The directory mode matching *file_mode*: search (x) wherever read (r) is allowed."""
    return file_mode | ((file_mode & 0o444) >> 2)


def private_dir(path: StrPath, mode: int = PRIVATE_DIR) -> Path:
    """Create *path* (and missing parents) with *mode*; return it.

    Directories that already exist are left as they are; the ones created here
    get exactly *mode* (not narrowed or widened by the umask).
    """
    target = Path(path)
    missing = []
    probe = target
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode)
        except FileExistsError:
            continue  # another process made it first; its mode is its own
        os.chmod(directory, mode)
    return target


def open_private(path: StrPath, flags: int = os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                 mode: int = PRIVATE_FILE) -> int:
    """``os.open`` that gives a file it creates exactly *mode*; returns the descriptor."""
    created = not os.path.exists(path)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), mode)
    if created and flags & os.O_CREAT:
        try:
            os.fchmod(fd, mode)  # the umask may have narrowed it; a wider mode was asked for
        except OSError:
            os.close(fd)
            raise
    return fd


def create_private_file(path: StrPath, mode: int = PRIVATE_FILE) -> bool:
    """Create *path* empty with *mode* unless it exists; True if it was created here."""
    try:
        fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def write_private_bytes(path: StrPath, data: bytes, mode: int = PRIVATE_FILE, *, durable: bool = False) -> None:
    """Replace *path* with *data* atomically (write a sibling, then rename), readable by the owner only.

    With ``durable=True`` the data is fsynced before the rename, so a crash
    leaves either the old or the new content.
    """
    target = os.fspath(path)
    temp = f"{target}.tmp-{os.getpid()}"
    fd = open_private(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def process_alive(pid: int) -> bool:
    """Whether a process with *pid* runs on this host: signal 0 reaches it, or is refused
    (it runs as another user). A pid the kernel has reused reads alive: a leftover is then
    kept, never removed from under a live owner."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
