"""Files appear whole or not at all (tailcut._atomic), even when the writer is killed mid-write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tailcut import _atomic
from tailcut._atomic import replacing, stale_temporaries

# Writes the old text, then starts the new one and blocks until killed, half-written.
KILLED_WRITER = """
import sys, time
from pathlib import Path
from tailcut._atomic import replacing
target = Path(sys.argv[1])
with replacing(target) as temporary:
    temporary.write_text("old")
with replacing(target) as temporary:
    with open(temporary, "w") as fh:
        fh.write("half of the new")
        fh.flush()
        print("writing", flush=True)
        time.sleep(600)
"""


def test_a_writer_killed_mid_write_leaves_the_old_file_and_only_a_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out" / "report.txt"
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(target)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "writing\n"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert target.read_text() == "old"
    [left] = [p for p in target.parent.iterdir() if p != target]
    assert left.name.startswith(".report.txt.") and left.name.endswith(".tmp")
    assert left.read_text() == "half of the new"
    assert list(stale_temporaries(target.parent)) == [left]  # its writer is gone
    left.unlink()
    with replacing(target) as temporary:
        temporary.write_text("new")
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.txt"]
    assert target.read_text() == "new"


def test_a_temporary_of_a_live_writer_is_not_stale_until_a_day_old(tmp_path: Path) -> None:
    mine = _atomic.temporary_name(tmp_path / "a.parquet")
    mine.write_text("")
    live = tmp_path / f".b.parquet.{os.getppid()}.00ff.tmp"
    live.write_text("")
    unrelated = tmp_path / ".c.parquet.tmp"  # not a name this module gives
    unrelated.write_text("")
    assert list(stale_temporaries(tmp_path)) == []
    day_old = time.time() - _atomic.STALE_AFTER_SECONDS - 60
    os.utime(live, (day_old, day_old))
    assert list(stale_temporaries(tmp_path)) == [live]


@pytest.mark.parametrize("failing", ["fsync_path", "replace"])
def test_a_failed_publish_leaves_the_target_as_it_was_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    target = tmp_path / "results.parquet"
    target.write_text("before")

    def broken(*args: object) -> None:
        raise OSError(28, "No space left on device")

    if failing == "replace":
        monkeypatch.setattr(_atomic.os, "replace", broken)
    else:
        monkeypatch.setattr(_atomic, failing, broken)
    with pytest.raises(OSError, match="No space"), replacing(target) as temporary:
        temporary.write_text("after")
    assert target.read_text() == "before"
    assert [p.name for p in tmp_path.iterdir()] == ["results.parquet"]


def test_a_directory_replaces_a_full_one_whole(tmp_path: Path) -> None:
    target = tmp_path / "corpus"
    with replacing(target, directory=True) as staging:
        (staging / "runs.parquet").write_text("1")
        (staging / "old-only").write_text("x")
    with replacing(target, directory=True) as staging:
        (staging / "runs.parquet").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["runs.parquet"]
    assert (target / "runs.parquet").read_text() == "2"
    assert [p.name for p in tmp_path.iterdir()] == ["corpus"]


def test_a_directory_whose_rename_fails_puts_the_old_one_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "corpus"
    with replacing(target, directory=True) as staging:
        (staging / "runs.parquet").write_text("1")
    real_replace, calls = os.replace, []

    def refuse_the_new(source: os.PathLike[str], destination: os.PathLike[str]) -> None:
        calls.append(source)
        if len(calls) == 2:  # the old one was moved aside; the new one is refused
            raise OSError(5, "Input/output error")
        real_replace(source, destination)

    monkeypatch.setattr(_atomic.os, "replace", refuse_the_new)
    with pytest.raises(OSError, match="Input/output"), replacing(target, directory=True) as staging:
        (staging / "runs.parquet").write_text("2")
    assert (target / "runs.parquet").read_text() == "1"
    assert [p.name for p in tmp_path.iterdir()] == ["corpus"]


def test_threads_writing_one_target_never_trip_over_each_other(tmp_path: Path) -> None:
    target = tmp_path / "sha256" / "ab" / "abcd.json"
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for _ in range(50):
                with replacing(target, durable=False) as temporary:
                    temporary.write_text(f"payload {n}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert target.read_text().startswith("payload ")
    assert [p.name for p in target.parent.iterdir()] == ["abcd.json"]
