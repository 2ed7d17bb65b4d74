"""``concentrator replay`` (issue 5): the connected-patient recording through the example's rules on Spark.

Expected by hand (as in examples/connected-patient/README.md): pat2's heart rate every 30 s from 10:00,
125/135 for five minutes then 115/125; 5-minute windows sliding by 30 s (t0 = 10:00) average 130, 129, …, 124
for the windows starting 10:00 … 10:03 (above the 123.9 bpm threshold: 7 alerts), then at most 123; the last
window [10:09:30, 10:14:30) holds the single reading 125 (an 8th alert). The chained rule pages once per alert.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyoxigraph import RdfFormat, Store

import concentrator.replay as replay_module
from concentrator.cli import main

pytestmark = pytest.mark.jvm  # Spark (or Jena): left out by make test-fast

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "connected-patient"
UUID = "urn:uuid:6f1c5d1e-2b7a-4c1e-9a51-000000000"
OBS = "http://hl7/org/fhir/Observation."


@pytest.fixture(scope="module", autouse=True)
def spark() -> Iterator[None]:
    """One Spark session for the module's replays (a replay keeps a session it did not start: it is process-wide,
    and the next test module of this worker that drives Spark reuses it too)."""
    from pipeline.spark import SparkSettings, spark_session

    spark_session(SparkSettings(app_name="test-replay"))
    yield


def test_replay_connected_patient(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    generate = [sys.executable, str(EXAMPLE / "generate.py")]
    (tmp_path / "activity-pat2.trig").write_bytes(subprocess.run(
        [*generate, "activity", "--values", "5,4,5,3", "--repeat", "--count", "20", "--every", "PT1M"],
        check=True, capture_output=True).stdout)
    readings = ",".join(["125,135"] * 5 + ["115,125"] * 5)
    (tmp_path / "hr-pat2.trig").write_bytes(subprocess.run(
        [*generate, "heart-rate", "--every", "PT30S", "--values", readings], check=True, capture_output=True).stdout)
    out = tmp_path / "out.trig"
    aliases = [f"--alias={name}={UUID}{number}" for name, number in (
        ("hr-pat2", "201"), ("activity-pat2", "202"), ("hr-pat3", "301"), ("activity-pat3", "302"))]
    status = main(["replay", str(tmp_path / "hr-pat2.trig"), str(tmp_path / "activity-pat2.trig"), "--rules",
                   str(EXAMPLE / "rules"), "--base", str(EXAMPLE / "base.trig"), *aliases, "--out", str(out)])
    printed = capsys.readouterr()
    assert status == 0, printed.err[-3000:]
    assert "output elements written" in printed.out and "alerts: 8" in printed.out and "pages: 8" in printed.out
    assert "replay:" not in printed.err  # progress lines only on a terminal (issue 34)
    store = Store()
    store.load(path=str(out), format=RdfFormat.TRIG)
    alerts = [(str(r["effective"].value), r["avg"].value) for r in store.query(
        f"SELECT ?effective ?avg {{ GRAPH ?g {{ ?o <{OBS}effectiveDateTime> ?effective ; <{OBS}valueQuantity> "
        "[ <http://hl7/org/fhir/Quantity.value> ?avg ] } } ORDER BY ?effective")]
    assert alerts == [("2016-06-20T10:04:30Z", "130"), ("2016-06-20T10:05:00Z", "129"),
                      ("2016-06-20T10:05:30Z", "128"), ("2016-06-20T10:06:00Z", "127"),
                      ("2016-06-20T10:06:30Z", "126"), ("2016-06-20T10:07:00Z", "125"),
                      ("2016-06-20T10:07:30Z", "124"), ("2016-06-20T10:09:30Z", "125")]
    pages = list(store.query("SELECT ?p { GRAPH ?p { ?p a <http://localhost/local-records#Page> } }"))
    assert len(pages) == 8


# --- clean-up (issue 12 item 4) ---------------------------------------------------------------------------------

XSD_DATETIME = "http://www.w3.org/2001/XMLSchema#dateTime"
PROV = "http://www.w3.org/ns/prov#generatedAtTime"
COUNT_RULE = """# output: counts
# report: non-empty-content
CONSTRUCT { <urn:count> <urn:n> ?n }
WHERE { SERVICE <streams/hr?WINDOWS=R/2016-06-20T10:00:00Z/PT01M> {
  SELECT (COUNT(*) AS ?n) { GRAPH ?g { ?s ?p ?o } } } }
"""


def _open_under(directory: Path) -> list[str]:
    """The files under ``directory`` this process holds open (an open store holds its lock file, its log...)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the fd of the listing itself is gone by now
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(f"{directory}/"):
                held.append(target)
    return held


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see open files")
def test_replay_closes_every_store_before_removing_its_scratch_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scratch directory is removed only once nothing in it is open: an open store (RocksDB) still writes
    files there, and removing the directory under it fails with 'Directory not empty: store'."""
    held_at_cleanup: list[list[str]] = []

    class Scratch(tempfile.TemporaryDirectory):  # type: ignore[type-arg]
        def cleanup(self) -> None:
            held_at_cleanup.append(_open_under(Path(self.name)))
            super().cleanup()

    monkeypatch.setattr(replay_module.tempfile, "TemporaryDirectory", Scratch)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "count.rq").write_text(COUNT_RULE)
    recording = tmp_path / "hr.trig"
    recording.write_text("".join(
        f'<http://ex/e{i}> <{PROV}> "2016-06-20T{at}Z"^^<{XSD_DATETIME}> .\n'
        f"<http://ex/e{i}> {{ <http://ex/s> <http://ex/v> {i} }}\n"
        for i, at in enumerate(["10:00:00", "10:00:30", "10:01:10"])))
    out = tmp_path / "out.trig"

    summary = replay_module.replay([recording], rules, out, progress=False, timeout=300)

    assert held_at_cleanup == [[]]
    # By hand: tumbling minutes from 10:00 hold 2 elements ([10:00, 10:01)) and 1 ([10:01, 10:02)); the later
    # windows up to the closing punctuation are empty and not reported (non-empty-content).
    assert summary.elements == 3 and summary.outputs == {"counts": 2}
    store = Store()
    store.load(path=str(out), format=RdfFormat.TRIG)
    counts = [row["n"].value for row in store.query("SELECT ?n { GRAPH ?g { <urn:count> <urn:n> ?n } } ORDER BY ?n")]
    assert counts == ["1", "2"]
