"""The embedded Spark session: local mode by default, tuned for tiny, frequent micro-batches.

The concentrator's micro-batches hold a handful of stream elements each, so every setting here aims at
per-batch overhead rather than throughput: few shuffle partitions, no adaptive execution, no UI, no Hive.
The same settings work against a cluster (``master="spark://…"``) when one machine is not enough.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Settings applied before ``SparkSettings.conf`` (which wins on conflicts).
BASE_CONF: dict[str, str] = {
    # No Hive metastore / derby directory in the working directory.
    "spark.sql.catalogImplementation": "in-memory",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Element timestamps are instants; windows and displayed times must not depend on the host's zone.
    "spark.sql.session.timeZone": "UTC",
    # AQE re-plans after every shuffle stage: pure overhead for batches of a few rows.
    "spark.sql.adaptive.enabled": "false",
    # pandas conversion of batch results (foreachBatch callbacks) through Arrow.
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Python workers are forked once and reused across tasks and micro-batches.
    "spark.python.worker.reuse": "true",
    # Keep the checkpoint small: we never need to roll back more than a few batches.
    "spark.sql.streaming.minBatchesToRetain": "10",
    # The idle loop of a trigger-0 query polls the source this often (Spark's default: 10 ms); a window's
    # completing element waits half of it on average. Every poll is a round trip to the Python source's planner
    # process: measured on 2 cores with 10 idle streams, 0.026 cores at 100 ms, 0.036 at 50 ms, 0.054 at 20 ms.
    "spark.sql.streaming.pollingDelay": "25ms",
    "spark.sql.streaming.stopTimeout": "30s",
    # The default checkpoint manager (FileContext) makes Hadoop fork `readlink` and `chmod` for every checkpoint
    # file it writes or renames when its native library is absent (pyspark ships none): measured with JFR, ≈ 1,100
    # processes during a 25 s ingest flood, ~8 per micro-batch. The FileSystem-based manager renames with the
    # local file system's own calls; its one caveat (rename is not atomic on object stores) does not apply to a
    # local or HDFS checkpoint.
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    # Each checkpoint file also gets a .crc file (and, without the native library, another `chmod` process):
    # the checkpoint is a few small JSON files per batch, which Spark validates when it reads them back.
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    # The driver JVM (which is also the executor in local mode) compiles with C1 only. Its work is per-batch
    # overhead on small batches, where C2's optimizing compiler never pays back: measured per thread over a 25 s
    # ingest flood, C2 compiler threads took 11 of the JVM's 17 CPU-seconds; with C1 only the JVM took 11 s in
    # all and the flood ran ~15 % faster. Spark also starts a few seconds sooner.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
}


@dataclass
class SparkSettings:
    """How to build the session; ``conf`` entries override the defaults in :data:`BASE_CONF`."""

    master: str = "local[2]"
    app_name: str = "rdf-stream-concentrator"
    conf: dict[str, str] = field(default_factory=dict)
    log_level: str = "WARN"
    shuffle_partitions: int = 2
    #: Map a class-data archive of Spark's classes into the driver JVM (written by the first session on this
    #: machine): see :func:`class_archive_options`.
    class_archive: bool = True


def _ensure_env(master: str) -> None:
    """Python workers run this interpreter (the venv) unless ``PYSPARK_PYTHON`` says otherwise. In local mode and
    with a master on this machine's loopback, Spark must not pick a public interface; with a remote master the
    driver must be reachable by the executors, so Spark picks the address (or ``SPARK_LOCAL_IP`` /
    ``spark.driver.host`` tell it: docs/deployment.md)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if is_on_this_machine(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def is_on_this_machine(master: str) -> bool:
    """``local[…]``, or a ``spark://`` master on a loopback address."""
    if master.startswith("local"):
        return True
    host = urlsplit(master).hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def spark_session(settings: SparkSettings | None = None) -> SparkSession:
    """Get or create the process-wide session.

    ``getOrCreate`` returns an existing session if there is one; static settings (master, memory) of that
    session then stay as they were, while runtime SQL settings given here are applied to it.
    """
    settings = settings or SparkSettings()
    _ensure_env(settings.master)
    conf = {**BASE_CONF, "spark.sql.shuffle.partitions": str(settings.shuffle_partitions), **settings.conf}
    if settings.class_archive and "spark.driver.extraJavaOptions" not in settings.conf:
        archive = class_archive_options(class_archive_path())
        conf["spark.driver.extraJavaOptions"] = f"{conf['spark.driver.extraJavaOptions']} {archive}"
    if not settings.master.startswith("local") and is_on_this_machine(settings.master) \
            and "spark.executor.extraJavaOptions" not in settings.conf:
        conf["spark.executor.extraJavaOptions"] = local_daemon_java_options(settings.class_archive)
    builder = SparkSession.builder.master(settings.master).appName(settings.app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.log_level)
    if not settings.master.startswith("local"):
        ship_code(spark)
    for noisy in ("py4j", "py4j.clientserver", "py4j.java_gateway"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    log.debug("spark session %s (%s)", spark.sparkContext.applicationId, settings.master)
    return spark


def class_archive_path() -> Path:
    """Where this installation's class-data archive lives: the user's cache (``CONCENTRATOR_CACHE`` or
    ``$XDG_CACHE_HOME/concentrator``), named after what the archive depends on (the JVM and Spark's jars)."""
    import pyspark

    java = os.environ.get("JAVA_HOME") or shutil.which("java") or "java"
    key = hashlib.sha256(f"{Path(java).resolve()}|{pyspark.__file__}|{pyspark.__version__}".encode()).hexdigest()
    cache = os.environ.get("CONCENTRATOR_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache",
                                                         "concentrator")
    return Path(cache) / f"spark-{pyspark.__version__}-{key[:12]}.jsa"


def local_daemon_java_options(class_archive: bool = True) -> str:
    """JVM options for Spark's executors and daemons on this machine (a cluster on one host): C1 only, as the driver
    (their work is per-batch overhead too), and the driver's class-data archive if it exists (never a dump of their
    own). Measured with the cluster test's replay (a master, two workers, two executors): 45 CPU-seconds without
    them, 23 with both (≈ 10 s less for each)."""
    options = "-XX:TieredStopAtLevel=1"
    archive = class_archive_path()
    if class_archive and archive.exists():
        options += f" -XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds*=off -Xlog:cds+dynamic*=off"
    return options


#: A dump older than this whose writer is gone is complete (the JVM writes it at its exit: ≈ 10 s here).
_DUMP_SETTLE_SECONDS = 60.0


def writing_marker(archive: Path) -> Path:
    """Where ``python -m pipeline.class_archive`` says (its pid) that it is writing ``archive``."""
    return Path(f"{archive}.writing")


def _being_written(archive: Path) -> bool:
    """Whether another process (``pipeline.class_archive``) is writing ``archive`` now."""
    try:
        pid = int(writing_marker(archive).read_text(encoding="ascii"))
        if pid == os.getpid():
            return False  # the writer's own JVM: it dumps
        os.kill(pid, 0)
    except PermissionError:
        return True  # alive, another user's
    except (OSError, ValueError):
        return False  # no marker, or its writer is gone
    return True


def class_archive_options(archive: Path) -> str:
    """The driver JVM's options for Spark's class-data archive (JDK AppCDS): map ``archive`` if it exists, else
    have this JVM write one when it exits (to a file of its own, which a later start renames into place).

    Loading and verifying Spark's ~10,000 classes is most of a session's start: measured here, the session takes
    2.8-3.3 s with the archive and 6.7 s without, and the first micro-batch 7-8 s instead of 9.5 s. A stale or
    broken archive is not an error: the JVM ignores it (``-Xshare:auto``)."""
    quiet = "-Xlog:cds*=off -Xlog:cds+dynamic*=off"
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        for dump in archive.parent.glob(f"{archive.name}.*.dump"):
            _settle(dump, archive)
    except OSError as error:  # an unwritable cache: start without the archive
        log.debug("no class-data archive: %s", error)
        return ""
    if archive.exists():
        return f"-XX:SharedArchiveFile={archive} -Xshare:auto {quiet}"
    if _being_written(archive):
        return ""  # it comes in a few seconds; a dump of this JVM's own (≈ 10 CPU-seconds at its exit) would be lost
    return f"-XX:ArchiveClassesAtExit={archive}.{os.getpid()}.dump {quiet}"


def _settle(dump: Path, archive: Path) -> None:
    """Rename a finished dump into place (or drop it if another one got there first)."""
    try:
        writer = int(dump.suffixes[-2].lstrip("."))
        os.kill(writer, 0)
        return  # its process (and JVM) still runs
    except (ValueError, IndexError):
        pass
    except ProcessLookupError:
        if time.time() - dump.stat().st_mtime < _DUMP_SETTLE_SECONDS:
            return
    except PermissionError:
        return
    if archive.exists() or dump.stat().st_size == 0 or not maps_safely(dump):
        dump.unlink(missing_ok=True)
    else:
        os.replace(dump, archive)


def maps_safely(dump: Path) -> bool:
    """Whether a JVM starts with ``dump`` mapped: a dump cut short (its JVM killed while writing it) makes the JVM
    crash as it maps it (SIGBUS), where a complete one that does not fit is merely ignored."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home, "bin", "java")) if java_home else (shutil.which("java") or "java")
    try:
        done = subprocess.run([java, f"-XX:SharedArchiveFile={dump}", "-Xshare:auto", "-Xlog:cds*=off",
                               "-Xlog:cds+dynamic*=off", "-XX:-CreateCoredumpOnCrash", "-XX:ErrorFile=/dev/null",
                               "-version"], capture_output=True, timeout=60, check=False, cwd=tempfile.gettempdir())
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


#: What executors import: the element log reader and rule evaluation, and what those import.
SHIPPED_PACKAGES = ("sparql_ext", "store", "engine", "rules", "pipeline")  # what executors import (rules.tasks)


def ship_code(spark: SparkSession) -> Path:
    """Send this server's own packages to the executors (``addPyFile``): they run the same code as the driver
    whatever is installed on the workers, which then need only Python and the pinned dependencies."""
    root = Path(__file__).resolve().parents[1]
    directory = tempfile.mkdtemp(prefix="concentrator-code-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)  # Spark reads it until the session stops
    target = Path(directory) / "concentrator-code.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in SHIPPED_PACKAGES:
            for path in sorted((root / package).rglob("*.py")):
                archive.write(path, path.relative_to(root).as_posix())
    spark.sparkContext.addPyFile(str(target))
    log.debug("shipped %s to the executors", target)
    return target
