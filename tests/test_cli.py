"""The command line refuses bad settings with a message naming them (before anything starts)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from concentrator.cli import build_parser
from conformance.server import running_server

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("args", "message"), [
    (["--spark-conf", "executor.memory=2g"], "write spark.KEY=VALUE"),
    (["--spark-conf", "spark.executor.memory"], "write spark.KEY=VALUE"),
    (["--rules-on", "workers"], "invalid choice: 'workers'"),
    (["--framing-processes", "-1"], "'-1': give a whole number (0 or more)"),
    (["--framing-processes", "two"], "'two': give a whole number (0 or more)"),
    (["--port", "80800"], "argument --port: '80800': give a TCP port, from 1 to 65535"),  # issue 34: no traceback
    (["--port", "http"], "argument --port: 'http': give a TCP port, from 1 to 65535"),
])
def test_bad_spark_settings_are_refused(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_good_spark_settings() -> None:
    args = build_parser().parse_args(["serve", "--spark-conf", "spark.executor.memory=2g", "--spark-conf",
                                      "spark.driver.host=10.0.0.4", "--rules-on", "executors"])
    assert dict(args.spark_conf) == {"spark.executor.memory": "2g", "spark.driver.host": "10.0.0.4"}
    assert args.rules_on == "executors"


# --- --rules (issue 12 item 5) ----------------------------------------------------------------------------------

COMMANDS = {"serve": ["serve"], "replay": ["replay", "hr.trig", "--out", "out.trig"]}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("make", "problem"), [
    (lambda path: None, "no such folder"),
    (lambda path: path.write_text("# output: alerts\nCONSTRUCT {} WHERE {}\n"), "is a file, not a folder"),
], ids=["missing", "file"])
def test_rules_that_are_not_a_folder_are_refused(
        command: str, make: Callable[[Path], object], problem: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "rules.rq"
    make(rules)
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([*COMMANDS[command], "--rules", str(rules)])
    error = capsys.readouterr().err.splitlines()[-1]
    assert exit_.value.code == 2
    assert f"argument --rules: {rules}" in error and problem in error


def test_replay_with_a_missing_rules_folder_exits_2_before_anything_runs(tmp_path: Path) -> None:
    recording = tmp_path / "hr.trig"
    recording.write_text("")
    done = subprocess.run([sys.executable, "-m", "concentrator", "replay", str(recording), "--rules",
                           str(tmp_path / "no-rules"), "--out", str(tmp_path / "out.trig")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"{tmp_path / 'no-rules'}: no such folder" in done.stderr
    assert not (tmp_path / "out.trig").exists()


def test_serve_warns_once_about_an_empty_rules_folder(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "README.txt").write_text("rules go here\n")  # not a NAME.rq file
    with running_server(["--no-pipeline", "--rules", str(rules)]) as server:
        log = server.log_path.read_text()
    warnings = [line for line in log.splitlines() if "warning" in line and str(rules) in line]
    assert len(warnings) == 1 and "no NAME.rq file" in warnings[0], log[-2000:]


@pytest.mark.jvm
def test_replay_warns_once_about_an_empty_rules_folder_and_writes_no_output(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    recording = tmp_path / "hr.trig"
    recording.write_text('<http://ex/e1> <http://www.w3.org/ns/prov#generatedAtTime> '
                         '"2016-06-20T10:00:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime> .\n'
                         "<http://ex/e1> { <http://ex/s> <http://ex/v> 1 }\n")
    done = subprocess.run([sys.executable, "-m", "concentrator", "replay", str(recording), "--rules", str(rules),
                           "--out", str(tmp_path / "out.trig")], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [line for line in done.stderr.splitlines() if "warning" in line and str(rules) in line]
    assert len(warnings) == 1 and "no NAME.rq file" in warnings[0], done.stderr[-2000:]
    assert "replayed 1 elements" in done.stdout and done.stdout.rstrip().endswith("out.trig: none")
    assert (tmp_path / "out.trig").read_bytes() == b""


def test_a_port_in_use_is_one_line_and_an_exit_at_once(tmp_path: Path) -> None:
    """Issue 34: gunicorn retried for 5 s and printed 11 lines; now one line naming the port, exit 1, before
    anything starts (no data directory made)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "concentrator", "serve", "--port", str(port), "--no-pipeline",
                               "--data", str(tmp_path / "data")], cwd=REPO, capture_output=True, text=True, timeout=60)
        took = time.monotonic() - started
    assert done.returncode == 1
    assert done.stderr == (f"concentrator serve: cannot listen on 127.0.0.1:{port}: port {port} is in use (another "
                           "server, or an earlier one still running); give --port\n")
    assert took < 4 and not (tmp_path / "data").exists(), took
