"""``concentrator tail`` (issue 12 item 6): bad arguments and a server that is down get one line naming the problem
and a non-zero exit (2 for bad arguments, 1 for a server that does not answer), never a traceback; while it waits
for the first window it says so, on a terminal only."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from concentrator.client import ClientError, windows
from conformance.server import RunningServer, free_port, running_server

REPO = Path(__file__).resolve().parent.parent


def tail(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "concentrator", "tail", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture(scope="module")
def nobody() -> str:
    """A stream URL on a port where nothing listens: a tail that got past its argument checks fails fast."""
    return f"http://127.0.0.1:{free_port()}/streams/hr"


@pytest.mark.parametrize(("args", "expected"), [
    # a one-shot ref is one window, answered once: nothing to follow
    (["{url}", "HEAD/-PT05M"], "'HEAD/-PT05M' is one window: tail needs a repeating WindowRef (R/…), "
                               "e.g. R/HEAD/PT05M/PT01M"),
    (["127.0.0.1:8080/streams/hr", "R/HEAD/PT01M"], "'127.0.0.1:8080/streams/hr' is not a URL: write "
                                                    "http://127.0.0.1:8080/streams/hr"),
    (["localhost:8080/streams/hr", "R/HEAD/PT01M"], "'localhost:8080/streams/hr' is not a URL: write "
                                                    "http://localhost:8080/streams/hr"),
    (["R/HEAD/PT01M", "{url}"], "the arguments are swapped: write concentrator tail {url} R/HEAD/PT01M"),
    (["R/HEAD/PT01M", "localhost:8080/streams/hr"], "the arguments are swapped: write concentrator tail "
                                                    "localhost:8080/streams/hr R/HEAD/PT01M"),
    (["{url}", "R/HEAD/PT5X"], "WINDOWS=R/HEAD/PT5X"),
], ids=["one-shot", "no-scheme-ip", "no-scheme-host", "swapped", "swapped-no-scheme", "bad-ref"])
def test_bad_arguments_get_one_line_and_exit_2(args: list[str], expected: str, nobody: str) -> None:
    done = tail(*(arg.format(url=nobody) for arg in args))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("concentrator tail: "), done.stderr
    assert expected.format(url=nobody) in done.stderr
    assert done.stdout == ""


def test_a_server_that_is_down_gets_one_line_and_exit_1(nobody: str) -> None:
    done = tail(nobody, "R/HEAD/PT01M")
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"concentrator tail: no server answers at {nobody.rsplit('/streams', 1)[0]}")
    assert "is it running?" in done.stderr


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server(["--no-pipeline"]) as running:  # repeating windows never complete: tail waits
        assert requests.put(f"{running.url}/streams/hr", timeout=10).status_code == 201
        element = ('<http://ex/e1> <http://www.w3.org/ns/prov#generatedAtTime> '
                   '"2016-06-20T10:00:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime> .\n'
                   "<http://ex/e1> { <http://ex/s> <http://ex/v> 1 }\n")
        assert requests.post(f"{running.url}/streams/hr", data=element, timeout=10,
                             headers={"Content-Type": "application/trig"}).ok  # HEAD/-PT05M: a complete window
        yield running


def test_the_client_refuses_a_one_shot_ref(server: RunningServer) -> None:
    """The server answers a one-shot ref with its one window, not a continuous response."""
    with pytest.raises(ClientError, match=r"not a continuous response .* needs a repeating WindowRef \(R/…\)"):
        next(windows(f"{server.url}/streams/hr", "HEAD/-PT05M"))


def test_the_client_turns_a_5xx_into_a_client_error(server: RunningServer) -> None:
    """Without resume, a server error ends the iteration with the server's answer (a one-shot window that does not
    complete within ``timeout=`` is a 503)."""
    assert requests.put(f"{server.url}/streams/empty", timeout=10).status_code == 201
    with pytest.raises(ClientError, match=r"^503: WINDOWS=HEAD/-PT05M: the window is not complete after 1 s"):
        next(windows(f"{server.url}/streams/empty?timeout=1", "HEAD/-PT05M"))


def registrations(server: RunningServer) -> int:
    return len(requests.get(f"{server.url}/status", timeout=10).json()["continuous"])


def wait_registered(server: RunningServer, count: int) -> None:
    deadline = time.monotonic() + 30
    while registrations(server) != count:
        assert time.monotonic() < deadline, f"{registrations(server)} continuous responses, not {count}"
        time.sleep(0.1)


WAITING = "concentrator tail: waiting for the first window of R/HEAD/PT01M (Ctrl-C stops)"


def _interruptible() -> None:
    """In the child: Ctrl-C as at a terminal. A test run started in the background by a shell without job control
    inherits SIGINT ignored, and Python then leaves it ignored (a background command is not stopped by Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_waiting_is_said_on_a_terminal(server: RunningServer) -> None:
    wait_registered(server, 0)  # an earlier test's tail is gone
    main, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "concentrator", "tail", f"{server.url}/streams/hr",
                                "R/HEAD/PT01M"], cwd=REPO, stdout=subprocess.PIPE, stderr=terminal,
                               preexec_fn=_interruptible)
    os.close(terminal)
    try:
        wait_registered(server, 1)
        said = b""
        while b"\n" not in said and select.select([main], [], [], 10)[0]:
            said += os.read(main, 1024)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        os.close(main)
    assert said.decode().splitlines() == [WAITING]
    assert process.stdout is not None and process.stdout.read() == b""


@pytest.mark.slow
def test_waiting_is_not_said_in_a_pipe(server: RunningServer) -> None:
    wait_registered(server, 0)
    process = subprocess.Popen([sys.executable, "-m", "concentrator", "tail", f"{server.url}/streams/hr",
                                "R/HEAD/PT01M"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               preexec_fn=_interruptible)
    try:
        wait_registered(server, 1)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0 and stdout == b"" and stderr == b""
