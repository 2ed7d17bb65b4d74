"""Write Spark's class-data archive ahead of time: ``python -m pipeline.class_archive``.

Without it, the first driver JVMs on a machine start without the archive (≈ 7 s of class loading instead of ≈ 3, and
≈ 20 CPU-seconds instead of ≈ 7), and each one writes a 170 MB dump at its exit, until one of those dumps has
settled (:func:`pipeline.spark.class_archive_options`). A test session (``tests/conftest.py``) starts dozens of
drivers, so it writes the archive first: one primed pipeline on an empty catalog, whose JVM is then stopped and
waited for, so that its dump is complete and can be put in place at once.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


def ensure_class_archive(timeout: float = 300.0) -> Path | None:
    """This installation's archive, written first by a child process if it is missing; ``None`` if it could not be
    (no Java, an unwritable cache: Spark then starts without one, as it would anyway)."""
    from pipeline.spark import class_archive_path

    archive = class_archive_path()
    if archive.exists():
        return archive
    try:
        done = subprocess.run([sys.executable, "-m", "pipeline.class_archive"], capture_output=True, text=True,
                              timeout=timeout, check=False, cwd=Path(__file__).resolve().parents[1])
    except (OSError, subprocess.TimeoutExpired) as error:
        log.warning("no class-data archive: %s", error)
        return None
    if done.returncode != 0:
        log.warning("no class-data archive: %s", done.stderr[-2000:])
    return archive if archive.exists() else None


def _write() -> int:
    """In the child: run one primed pipeline batch in a JVM that dumps its classes at exit, stop that JVM, wait for
    it, check the dump and rename it into place."""
    from pyspark import SparkContext

    from pipeline.batches import WindowPipeline
    from pipeline.spark import SparkSettings, class_archive_path, maps_safely
    from store.streams import StreamCatalog

    archive = class_archive_path()
    dump = Path(f"{archive}.{os.getpid()}.dump")  # the name class_archive_options gives this process's JVM
    with tempfile.TemporaryDirectory(prefix="concentrator-archive-") as scratch:
        catalog = StreamCatalog(Path(scratch) / "streams")
        pipeline = WindowPipeline(catalog, Path(scratch), SparkSettings(app_name="class-archive"))
        pipeline.start()  # the session, then the query's first batch (primed)
        pipeline.stop(stop_session=True)
        catalog.close()
    gateway = SparkContext._gateway
    if gateway is not None:  # the JVM exits (writing the dump) when its standard input closes
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
