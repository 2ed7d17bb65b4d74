"""Spark's class-data archive (pipeline/spark.py): a finished dump is renamed into place and then mapped; a dump cut
short (its JVM killed while writing it, which makes a JVM mapping it crash) is dropped; a dump still being written
(its process alive, or written in the last minute) is left alone."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from pipeline.spark import class_archive_options, writing_marker

pytestmark = pytest.mark.jvm  # starts a JVM (java -version) to write and check archives


def _dump(path: Path) -> None:
    """A real dynamic archive: what a JVM writes at its exit with -XX:ArchiveClassesAtExit."""
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH (Java 17 is on every machine; install openjdk-17-jre-headless)")
    subprocess.run([java, f"-XX:ArchiveClassesAtExit={path}", "-Xlog:cds*=off", "-Xlog:cds+dynamic*=off",
                    "-version"], check=True, capture_output=True, cwd=path.parent)


def _dead_pid() -> int:
    pid = 4_000_000  # above Linux's pid_max (4,194,304 at most) minus a margin: no process has it
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1


def test_a_finished_dump_is_used_and_a_cut_one_dropped(tmp_path: Path) -> None:
    archive = tmp_path / "spark-test.jsa"
    good = Path(f"{archive}.{_dead_pid()}.dump")
    _dump(good)
    old = time.time() - 3600
    os.utime(good, (old, old))
    # the dump settles (renamed into place) and this start maps it
    assert class_archive_options(archive).startswith(f"-XX:SharedArchiveFile={archive} ")
    assert archive.exists() and not good.exists()

    cut = tmp_path / "other.jsa"
    broken = Path(f"{cut}.{_dead_pid()}.dump")
    broken.write_bytes(archive.read_bytes()[: archive.stat().st_size // 3])  # a JVM killed while writing
    os.utime(broken, (old, old))
    options = class_archive_options(cut)
    assert not broken.exists() and not cut.exists()
    assert options == f"-XX:ArchiveClassesAtExit={cut}.{os.getpid()}.dump -Xlog:cds*=off -Xlog:cds+dynamic*=off"


def test_a_dump_being_written_is_left_alone(tmp_path: Path) -> None:
    archive = tmp_path / "spark-test.jsa"
    mine = Path(f"{archive}.{os.getpid()}.dump")  # this process is alive: its JVM may still write it
    mine.write_bytes(b"partial")
    recent = Path(f"{archive}.{_dead_pid()}.dump")  # its process is gone, but it changed a moment ago
    recent.write_bytes(b"partial")
    class_archive_options(archive)
    assert mine.exists() and recent.exists() and not archive.exists()


def test_while_the_archive_is_being_written_other_drivers_neither_map_nor_dump(tmp_path: Path) -> None:
    archive = tmp_path / "spark-test.jsa"
    marker = writing_marker(archive)
    marker.write_text(str(os.getppid()))  # a live process other than this one: the writer (pipeline.class_archive)
    assert class_archive_options(archive) == ""
    marker.write_text(str(os.getpid()))  # this process is the writer: its JVM dumps
    assert class_archive_options(archive).startswith(f"-XX:ArchiveClassesAtExit={archive}.{os.getpid()}.dump ")
    marker.write_text(str(_dead_pid()))  # a writer that died: the marker is stale, drivers dump as before
    assert class_archive_options(archive).startswith("-XX:ArchiveClassesAtExit=")
