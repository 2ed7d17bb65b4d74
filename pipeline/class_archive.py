"""Write Spark's class-data archive ahead of time: ``python -m pipeline.class_archive``.

Without it, the first driver JVMs on a machine start without the archive (≈ 7 s of class loading instead of ≈ 3, and
≈ 20 CPU-seconds instead of ≈ 7), and each one writes a 170 MB dump at its exit, until one of those dumps has
settled (:func:`pipeline.spark.class_archive_options`). A test session (``tests/conftest.py``) starts dozens of
drivers, so it writes the archive first, while the tests that need no JVM run: one primed pipeline on an empty
catalog, whose JVM is
then stopped and waited for, so that its dump is complete and can be put in place at once (≈ 35 s: ≈ 22 to start
and prime, ≈ 11 for the JVM to write the dump). Meanwhile a marker file tells drivers that start (a server, say) to
go without the archive and to write no dump of their own.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


def start_class_archive() -> subprocess.Popen[str] | None:
    """Start writing this installation's archive in a child process, unless it exists (None then). Drivers started
    meanwhile start without it and write no dump of their own (``pipeline.spark.class_archive_options``)."""
    from pipeline.spark import class_archive_path

    if class_archive_path().exists():
        return None
    try:
        return subprocess.Popen([sys.executable, "-m", "pipeline.class_archive"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    except OSError as error:
        log.warning("no class-data archive: %s", error)
        return None


def ensure_class_archive(timeout: float = 300.0) -> Path | None:
    """This installation's archive, written first by a child process if it is missing; ``None`` if it could not be
    (no Java, an unwritable cache: Spark then starts without one, as it would anyway)."""
    from pipeline.spark import class_archive_path

    writer = start_class_archive()
    if writer is not None:
        try:
            _, errors = writer.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            writer.kill()
            _, errors = writer.communicate()
        if writer.returncode != 0:
            log.warning("no class-data archive: %s", (errors or "")[-2000:])
    archive = class_archive_path()
    return archive if archive.exists() else None


def _write() -> int:
    """In the child: run one primed pipeline batch in a JVM that dumps its classes at exit, stop that JVM, wait for
    it, check the dump and rename it into place. While it runs, its marker tells other drivers not to dump."""
    from pipeline.spark import class_archive_path, writing_marker

    archive = class_archive_path()
    if archive.exists():
        return 0
    marker = writing_marker(archive)
    archive.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(str(os.getpid()), encoding="ascii")
    try:
        return _write_dump(archive, Path(f"{archive}.{os.getpid()}.dump"))  # the dump name this JVM is given
    finally:
        marker.unlink(missing_ok=True)


def _write_dump(archive: Path, dump: Path) -> int:
    from pyspark import SparkContext

    from pipeline.batches import WindowPipeline
    from pipeline.spark import SparkSettings, maps_safely
    from store.streams import StreamCatalog

    with tempfile.TemporaryDirectory(prefix="concentrator-archive-") as scratch:
        catalog = StreamCatalog(Path(scratch) / "streams")
        pipeline = WindowPipeline(catalog, Path(scratch), SparkSettings(app_name="class-archive"))
        pipeline.start()  # the session, then the query's first batch (primed)
        pipeline.stop(stop_session=True)
        catalog.close()
    gateway = SparkContext._gateway
    if gateway is not None:  # the JVM exits (writing the dump: ≈ 10 s) when its standard input closes
        gateway.shutdown()
        process = gateway.proc  # set by pyspark's launch_gateway
        process.stdin.close()
        process.wait(120)
    if archive.exists() or not dump.exists():
        dump.unlink(missing_ok=True)
        return 0 if archive.exists() else 1
    if not maps_safely(dump):
        dump.unlink(missing_ok=True)
        return 1
    os.replace(dump, archive)
    return 0


if __name__ == "__main__":
    sys.exit(_write())
