"""``concentrator upload FILE URL`` (issue 17): a recorded stream sent element by element to a real server, every
literal as it was written; resumed after the server crashed mid-upload; one-line errors with exit codes; a progress
bar on a terminal only. Expected values are worked out by hand from the files each test writes."""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from conformance.server import REPO_ROOT, RunningServer, free_port, kill_tree, running_server

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD = "http://www.w3.org/2001/XMLSchema#"
XSD_DT = f"{XSD}dateTime"
T0 = dt.datetime(2016, 6, 20, 10, 0, tzinfo=dt.UTC)


def concentrator(*args: str | Path, env: dict[str, str] | None = None, stderr: int = subprocess.PIPE,
                 timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "concentrator", "upload", *map(str, args)], cwd=REPO_ROOT,
                          stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def readings(count: int, first: int = 0) -> str:
    """Elements e{first}… one second apart from 10:00:00, in N-Quads."""
    return "".join(
        f'<http://ex/e{i}> <{PROV}> "{(T0 + dt.timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ")}"^^<{XSD_DT}> .\n'
        f'<http://ex/o{i}> <http://ex/hr> "{60 + i % 50}"^^<{XSD}integer> <http://ex/e{i}> .\n'
        for i in range(first, first + count))


def records(server: RunningServer, stream: str) -> list[tuple[int, str]]:
    """(ordinal, graph) of every element of the stream, in order."""
    found: list[tuple[int, str]] = []
    start = 1
    while True:
        page = requests.get(f"{server.url}/streams/{stream}/elements", params={"from": start}, timeout=30).json()
        found += [(r["ordinal"], r["graph"]) for r in page["elements"]]
        if not page["elements"] or found[-1][0] >= page["head"]:
            return found
        start = found[-1][0] + 1


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server(["--no-pipeline"]) as running:
        yield running


@pytest.mark.slow
def test_a_trig_file_is_uploaded_element_by_element_every_literal_kept(server: RunningServer, tmp_path: Path) -> None:
    file = tmp_path / "hr.trig"
    file.write_text("""@prefix ex: <http://ex/> .
@prefix prov: <http://www.w3.org/ns/prov#> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
ex:e1 prov:generatedAtTime "2016-06-20T10:00:00Z"^^xsd:dateTime .
ex:e1 { ex:o1 ex:hr 70 ; ex:note "line one\\nline two"@en . }
ex:e2 { ex:o2 ex:hr 71.50 ; ex:label \"\"\"a "quoted" word\"\"\" . _:b7 ex:p ex:q . }
ex:e2 prov:generatedAtTime "2016-06-20T12:00:01+02:00"^^xsd:dateTime .
ex:e3 prov:generatedAtTime "2016-06-20T10:00:02.5Z"^^xsd:dateTime .
ex:e3 { ex:o3 ex:hr "072"^^xsd:integer . }
""", encoding="utf-8")
    url = f"{server.url}/streams/recorded"
    done = concentrator(file, url, "--create")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no terminal: no progress bar
    assert done.stdout.startswith(f"3 element(s) of {file} committed to {url} (ordinals 1–3) in ")
    assert done.stdout.rstrip().endswith("HEAD is ordinal 3, stream time 2016-06-20T10:00:02.5Z")
    stored = requests.get(url, params={"WINDOWS": "HEAD~2/HEAD"}, headers={"Accept": "application/n-quads"},
                          timeout=10).text
    xsd = "http://www.w3.org/2001/XMLSchema#"
    assert set(stored.splitlines()) == {
        f'<http://ex/e1> <{PROV}> "2016-06-20T10:00:00Z"^^<{xsd}dateTime> .',
        '<http://ex/o1> <http://ex/hr> "70"^^<http://www.w3.org/2001/XMLSchema#integer> <http://ex/e1> .',
        '<http://ex/o1> <http://ex/note> "line one\\nline two"@en <http://ex/e1> .',
        f'<http://ex/e2> <{PROV}> "2016-06-20T12:00:01+02:00"^^<{xsd}dateTime> .',
        '<http://ex/o2> <http://ex/hr> "71.50"^^<http://www.w3.org/2001/XMLSchema#decimal> <http://ex/e2> .',
        '<http://ex/o2> <http://ex/label> "a \\"quoted\\" word" <http://ex/e2> .',
        '_:b7 <http://ex/p> <http://ex/q> <http://ex/e2> .',
        f'<http://ex/e3> <{PROV}> "2016-06-20T10:00:02.5Z"^^<{xsd}dateTime> .',
        '<http://ex/o3> <http://ex/hr> "072"^^<http://www.w3.org/2001/XMLSchema#integer> <http://ex/e3> .',
    }


@pytest.mark.slow
def test_an_nquads_file_with_its_format_given_and_a_write_token(tmp_path: Path) -> None:
    file = tmp_path / "readings.txt"
    file.write_text(readings(5), encoding="utf-8")
    with running_server(["--no-pipeline", "--token", "s3cret"]) as secured:
        url = f"{secured.url}/streams/hr"
        refused = concentrator(file, url, "--format", "nquads", "--create")
        assert refused.returncode == 1
        assert refused.stderr.startswith("concentrator upload: could not create the stream: 401: ")
        assert refused.stderr.count("\n") == 1
        done = concentrator(file, url, "--format", "nquads", "--create", env={"CONCENTRATOR_TOKEN": "s3cret"})
        assert done.returncode == 0, done.stderr
        assert records(secured, "hr") == [(i + 1, f"<http://ex/e{i}>") for i in range(5)]


@pytest.mark.slow
def test_the_upload_resumes_after_the_server_crashed(tmp_path: Path) -> None:
    """20,000 elements in batches of 500; the server is killed (SIGKILL) once 1,000 are committed and started again
    on the same port and data: the upload goes on, and the stream ends with each element once, in order."""
    count = 20_000
    file = tmp_path / "flood.nq"
    file.write_text(readings(count), encoding="utf-8")
    data, port = tmp_path / "data", free_port()
    with running_server(["--no-pipeline"], data_dir=data, port=port) as first:
        url = f"{first.url}/streams/flood"
        assert requests.put(url, timeout=10).status_code == 201
        sending = subprocess.Popen([sys.executable, "-m", "concentrator", "upload", str(file), url, "--batch", "500",
                                    "--give-up", "90"], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        committed = 0
        while committed < 1_000:
            assert time.monotonic() < deadline, "the upload did not start"
            committed = requests.get(url, headers={"Accept": "application/json"}, timeout=10).json()["elements"]
            time.sleep(0.02)
        kill_tree(first.process.pid)
        first.process.wait()
    assert committed < count, "the upload ended before the crash: make the file larger"
    with running_server(["--no-pipeline"], data_dir=data, port=port) as second:
        out, err = sending.communicate(timeout=180)
        assert sending.returncode == 0, err
        assert out.startswith(f"{count:,} element(s) of {file} committed to {url}")
        assert records(second, "flood") == [(i + 1, f"<http://ex/e{i}>") for i in range(count)]


def test_the_same_command_again_continues_after_what_was_committed(tmp_path: Path, server: RunningServer) -> None:
    """Issue 34: an upload interrupted after 3 of 6 elements (here: the first 3 posted by hand) and the same command run
    again: exit 0, the last 3 sent, each element once; a third run sends nothing and still exits 0."""
    file = tmp_path / "six.nq"
    file.write_text(readings(6), encoding="utf-8")
    url = f"{server.url}/streams/again"
    assert requests.put(url, timeout=10).status_code == 201
    assert requests.post(url, data=readings(3), headers={"Content-Type": "application/n-quads"},
                         timeout=10).json()["committed"] == 3
    done = concentrator(file, url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"3 element(s) of {file} committed to {url} (ordinals 4–6)")
    assert "3 earlier element(s) of it were already in the stream" in done.stdout
    again = concentrator(file, url)
    assert again.returncode == 0 and again.stdout.startswith(f"0 element(s) of {file} committed"), again.stderr
    assert records(server, "again") == [(i + 1, f"<http://ex/e{i}>") for i in range(6)]


@pytest.mark.slow
def test_an_interrupted_upload_says_how_many_were_committed_and_how_to_continue(tmp_path: Path,
                                                                                server: RunningServer) -> None:
    count = 3_000
    file = tmp_path / "long.nq"
    file.write_text(readings(count), encoding="utf-8")
    url = f"{server.url}/streams/interrupted"
    assert requests.put(url, timeout=10).status_code == 201
    sending = subprocess.Popen([sys.executable, "-m", "concentrator", "upload", str(file), url, "--batch", "20"],
                               cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while requests.get(url, headers={"Accept": "application/json"}, timeout=10).json()["elements"] < 100:
        assert time.monotonic() < deadline, "the upload did not start"
        time.sleep(0.02)
    sending.send_signal(signal.SIGINT)
    _, err = sending.communicate(timeout=60)
    held = requests.get(url, headers={"Accept": "application/json"}, timeout=10).json()["elements"]
    assert sending.returncode == 130 and held < count, err
    said = re.fullmatch(r"concentrator upload: interrupted: ([0-9,]+) element\(s\) of (\S+) are committed \(the "
                        r"stream's HEAD is ordinal ([0-9]+)\); run the same command again to continue after them "
                        r"\(concentrator upload (\S+) (\S+) …\)\n", err)
    assert said is not None, err
    # what the server had committed when the client asked; a batch in flight may be committed just after
    committed = int(said[1].replace(",", ""))
    assert 100 <= committed <= held and int(said[3]) == committed and said[2] == said[4] == str(file), err
    done = concentrator(file, url, "--batch", "500")
    assert done.returncode == 0, done.stderr
    assert records(server, "interrupted") == [(i + 1, f"<http://ex/e{i}>") for i in range(count)]


@pytest.mark.parametrize(("make", "args", "code", "message"), [
    (None, [], 2, "concentrator upload: {file}: no such file\n"),
    ("readings", ["--format", "turtle"], 2, None),
    ("unknown-extension", [], 2, "concentrator upload: {file}: cannot tell its format from '.rdf': give --format "
                                 "trig or --format nquads\n"),
], ids=["missing", "bad-format-option", "unknown-extension"])
@pytest.mark.slow
def test_bad_command_lines_exit_2(make: str | None, args: list[str], code: int, message: str | None,
                                  tmp_path: Path, server: RunningServer) -> None:
    file = tmp_path / ("data.rdf" if make == "unknown-extension" else "data.nq")
    if make is not None:
        file.write_text(readings(1), encoding="utf-8")
    done = concentrator(file, f"{server.url}/streams/x", *args)
    assert done.returncode == code
    if message is not None:
        assert done.stderr == message.format(file=file)
    else:
        assert "invalid choice: 'turtle'" in done.stderr


def test_no_server_and_no_stream_are_one_line_errors(tmp_path: Path, server: RunningServer) -> None:
    file = tmp_path / "a.nq"
    file.write_text(readings(2), encoding="utf-8")
    port = free_port()
    gone = concentrator(file, f"http://127.0.0.1:{port}/streams/hr")
    assert gone.returncode == 1
    assert gone.stderr == (f"concentrator upload: no server answers at http://127.0.0.1:{port}: is it running? "
                           "(Connection refused)\n")
    missing = concentrator(file, f"{server.url}/streams/nowhere")
    assert missing.returncode == 1
    assert missing.stderr.startswith(f"concentrator upload: {server.url}/streams/nowhere: ")
    assert missing.stderr.endswith("create it with PUT /streams/nowhere (or give --create)\n")
    assert missing.stderr.count("\n") == 1


def test_a_refused_element_stops_the_upload_and_says_how_many_were_committed(tmp_path: Path,
                                                                             server: RunningServer) -> None:
    file = tmp_path / "late.nq"
    # e0, e1, then an element at 09:59:00: before stream time 10:00:01
    file.write_text(readings(2) + f'<http://ex/late> <{PROV}> "2016-06-20T09:59:00Z"^^<{XSD_DT}> .\n'
                    '<http://ex/o> <http://ex/hr> "1"^^<http://www.w3.org/2001/XMLSchema#integer> <http://ex/late> .\n'
                    + readings(1, first=5), encoding="utf-8")
    url = f"{server.url}/streams/refusing"
    done = concentrator(file, url, "--create")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert "409: element 3 (graph <http://ex/late>): timestamp 2016-06-20T09:59:00Z is not after the stream time " \
           "2016-06-20T10:00:01Z" in done.stderr
    assert done.stderr.endswith(f"(2 element(s) of {file} were committed before it)\n")
    assert records(server, "refusing") == [(1, "<http://ex/e0>"), (2, "<http://ex/e1>")]


def test_a_syntax_error_in_the_file_sends_what_came_before_it(tmp_path: Path, server: RunningServer) -> None:
    file = tmp_path / "broken.nq"
    file.write_text(readings(2) + "<http://ex/e2> <http://ex/p> .\n", encoding="utf-8")
    url = f"{server.url}/streams/broken"
    done = concentrator(file, url, "--create")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    # the framer cannot tell whether the error ends e1 or starts the next element: neither is sent (store.elements)
    assert done.stderr.startswith("concentrator upload: element 2 (graph <http://ex/e1>) or the element after it, "
                                  "near byte ")
    assert done.stderr.endswith(f"(1 element(s) of {file} were committed before it)\n")
    assert records(server, "broken") == [(1, "<http://ex/e0>")]


@pytest.mark.slow
def test_a_progress_bar_on_a_terminal(tmp_path: Path, server: RunningServer) -> None:
    file = tmp_path / "bar.nq"
    file.write_text(readings(3000), encoding="utf-8")
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # a terminal of 160 columns
    shown = bytearray()

    def read_terminal() -> None:  # as it is written: a full terminal buffer would block the command
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal closed
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        done = concentrator(file, f"{server.url}/streams/bar", "--create", "--batch", "500", stderr=secondary)
    finally:
        os.close(secondary)
        reader.join(10)
        os.close(primary)
    assert done.returncode == 0
    screen = shown.decode("utf-8", errors="replace")
    assert "bar.nq: 100%" in screen
    assert "3,000 elements committed" in screen
    assert "ETA" in screen
