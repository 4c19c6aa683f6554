"""Files that appear whole or not at all: the one home of write-to-a-temporary-name-then-rename.

Every writer of a file or directory another process may read (a data dir's Parquet parts, the payload
store, a corpus, a report, a findings or results file) writes it under a temporary dot name in the same
directory, flushes it to stable storage, renames it over the final name and flushes the directory, so a
reader sees the old file, the new one, or none, never half of one, even across ``kill -9`` or a power cut.
If the writing fails, the temporary is removed and the target is left as it was.

A temporary is named ``.<final name>.<pid>.<random>.tmp``: a dot name no glob of the final kind matches
(``*.parquet`` does not see ``.part-1.parquet.42.9f3a.tmp``), unique to one write even when threads of
one process write the same target, and naming its writer, so :func:`stale_temporaries` can find what a
killed writer left once that process is gone.

Examples
--------
>>> import tempfile
>>> from pathlib import Path
>>> target = Path(tempfile.mkdtemp()) / "report.txt"
>>> with replacing(target) as temporary:
...     _ = temporary.write_text("whole")
>>> target.read_text()
'whole'
>>> try:
...     with replacing(target) as temporary:
...         _ = temporary.write_text("half")
...         raise RuntimeError("disk full")
... except RuntimeError:
...     pass
>>> target.read_text(), sorted(p.name for p in target.parent.iterdir())
('whole', ['report.txt'])
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

#: Every temporary ends so; the writer's pid is the second-to-last dotted field.
TEMP_SUFFIX: Final = ".tmp"
_TEMPORARY: Final = re.compile(r"^\..+\.(\d+)\.[0-9a-f]+\.tmp$")
#: A temporary this old is stale even if its pid now belongs to a live (reused) process.
STALE_AFTER_SECONDS: Final = 24 * 3600


def fsync_path(path: Path) -> None:
    """Flush a file's (or a directory's) contents to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    if path.is_dir():
        for child in path.rglob("*"):
            if child.is_file():
                fsync_path(child)
    fsync_path(path)


def publish(temporary: Path, final: Path, *, durable: bool = True) -> None:
    """Make a finished temporary file or directory visible under its final name.

    ``durable`` (the default) flushes the temporary before the rename and the directory after it, so the
    new name survives a power cut with its whole contents. A directory that replaces a non-empty one
    first moves the old one aside (``os.replace`` refuses a full directory) and removes it afterwards:
    a reader sees the old directory, briefly none, or the new one, never a mix of both.
    """
    if durable:
        _fsync_tree(temporary)
    old: Path | None = None
    if temporary.is_dir() and final.is_dir() and any(final.iterdir()):
        old = temporary_name(final)
        os.replace(final, old)
    try:
        os.replace(temporary, final)
    except BaseException:
        if old is not None:
            os.replace(old, final)
        raise
    if durable:
        fsync_path(final.parent)
    if old is not None:
        _remove(old)


def temporary_name(final: Path) -> Path:
    """A new dot name beside ``final``, unique to this write, that names this process as its writer."""
    return final.with_name(f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def stale_temporaries(root: Path, pattern: str = f"**/.*{TEMP_SUFFIX}") -> Iterator[Path]:
    """Temporaries under ``root`` (matching the glob ``pattern``) whose writer is gone or that are old.

    A writer killed mid-write leaves only its temporary; the next writer of the same place removes it
    with this. A temporary of this process, or of a live one younger than a day, is still being written.
    """
    now = time.time()
    for path in root.glob(pattern):
        match = _TEMPORARY.match(path.name)
        if match is None:
            continue
        pid = int(match.group(1))
        try:
            old = now - path.stat().st_mtime > STALE_AFTER_SECONDS
        except FileNotFoundError:
            continue
        if pid != os.getpid() and (old or not _alive(pid)):
            yield path


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def replacing(
    target: str | os.PathLike[str], *, directory: bool = False, durable: bool = True
) -> Iterator[Path]:
    """Yield a temporary path beside ``target`` to write; on success it replaces ``target`` atomically.

    With ``directory`` the temporary is an empty directory created for the caller to fill. On an
    exception inside the block the temporary is removed, ``target`` is untouched, and the exception
    propagates. The parent directory is created if missing. ``durable=False`` skips the flushes (see
    :func:`publish`), for a writer whose readers detect a file lost to a power cut on their own.
    """
    final = Path(target)
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_name(final)
    if directory:
        temporary.mkdir()
    try:
        yield temporary
        publish(temporary, final, durable=durable)
    except BaseException:
        _remove(temporary)
        raise
