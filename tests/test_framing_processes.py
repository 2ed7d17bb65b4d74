"""Uploads framed with the server's framing processes (store.canonical): the same elements, byte for byte, as
framing in one thread; errors named as precisely, with the elements before them; a framing process that dies
costs nothing; none outlives the server process.

Expected values are written by hand from the bodies (graph names, timestamps, counts), not taken from a run."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest
from pyoxigraph import RdfFormat

from store.canonical import REMOTE_BYTES, FramingProcesses
from store.elements import ParsedElement
from store.errors import ElementRejected, RdfSyntaxError
from store.framing import ElementFramer

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD = "http://www.w3.org/2001/XMLSchema#"


@pytest.fixture
def processes() -> Iterator[FramingProcesses]:
    pool = FramingProcesses(1)
    yield pool
    pool.close()


def nquads(first: int, count: int, graphs: str = "http://a/") -> str:
    """Elements ``first`` … of 3 statements each: ``<graphs e{n}>``, timestamp n seconds after 2026-01-01."""
    return "".join(
        f'<{graphs}e{n}> <{PROV}> "2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}Z"^^<{XSD}dateTime> .\n'
        f'_:s{n} <http://ex/v> "{n}"^^<{XSD}integer> <{graphs}e{n}> .\n'
        f'_:s{n} <http://ex/label> "reading {n}"@en <{graphs}e{n}> .\n'
        f'_:s{n} <http://ex/note> "line\\none \\"{n}\\"" <{graphs}e{n}> .\n'
        for n in range(first, first + count))


def frame(body: bytes, rdf_format: RdfFormat, pool: FramingProcesses | None) -> list[ParsedElement]:
    options = {} if pool is None else {"segments": pool}
    return list(ElementFramer(io.BytesIO(body), rdf_format, PROV, **options))  # type: ignore[arg-type]


def framed_until_error(body: bytes, rdf_format: RdfFormat, pool: FramingProcesses | None
                       ) -> tuple[list[ParsedElement], Exception]:
    options = {} if pool is None else {"segments": pool}
    elements: list[ParsedElement] = []
    with pytest.raises(Exception) as raised:  # noqa: PT011 - the type is checked by the caller
        for element in ElementFramer(io.BytesIO(body), rdf_format, PROV, **options):  # type: ignore[arg-type]
            elements.append(element)
    return elements, raised.value


def test_a_large_nquads_upload_is_framed_in_a_framing_process_exactly_as_in_one_thread(
        processes: FramingProcesses) -> None:
    body = nquads(0, 3000).encode()  # ≈ 800 KB: several segments
    assert len(body) > 10 * REMOTE_BYTES
    remote = frame(body, RdfFormat.N_QUADS, processes)
    assert processes.status()["segments"] >= 3
    assert len(remote) == 3000
    assert [str(e.graph) for e in remote[:2]] == ["<http://a/e0>", "<http://a/e1>"]
    assert remote[61].time == 1767225600_000000 + 61_000000  # 2026-01-01T00:01:01Z
    assert remote[7].stamp_line == f'<http://a/e7> <{PROV}> "2026-01-01T00:00:07Z"^^<{XSD}dateTime> .\n'.encode()
    assert b'"line\\none \\"7\\""' in (remote[7].block or b"")  # the literal's escapes as they came
    assert b'"reading 7"@en' in (remote[7].block or b"")
    inline = frame(body, RdfFormat.N_QUADS, None)
    assert [(str(e.graph), e.time, e.block, e.stamp_line) for e in remote] == \
        [(str(e.graph), e.time, e.block, e.stamp_line) for e in inline]


def test_a_large_trig_upload_keeps_its_prefixes_across_segments(processes: FramingProcesses) -> None:
    elements = "".join(f'g:e{n} {{ _:s{n} ex:v {n} ; ex:w "w{n}" . }}\ng:e{n} prov:generatedAtTime '
                       f'"2026-01-01T01:00:{n % 60:02d}.{n:06d}Z"^^xsd:dateTime .\n' for n in range(4000))
    body = (f"@prefix g: <http://a/> .\n@prefix ex: <http://ex/> .\n@prefix prov: <http://www.w3.org/ns/prov#> .\n"
            f"@prefix xsd: <{XSD}> .\n" + elements).encode()
    remote = frame(body, RdfFormat.TRIG, processes)
    assert processes.status()["segments"] >= 2
    assert len(remote) == 4000
    assert str(remote[3999].graph) == "<http://a/e3999>"  # a prefix declared in the first segment, used in the last
    assert b"<http://ex/w>" in (remote[3999].block or b"")
    inline = frame(body, RdfFormat.TRIG, None)
    assert [(str(e.graph), e.time, e.block) for e in remote] == [(str(e.graph), e.time, e.block) for e in inline]


def test_a_syntax_error_in_a_later_segment_keeps_the_elements_before_it(processes: FramingProcesses) -> None:
    body = (nquads(0, 2000) + "<http://a/bad> <http://ex/p> unquoted <http://a/bad> .\n" + nquads(2000, 50)).encode()
    for pool in (processes, None):
        elements, error = framed_until_error(body, RdfFormat.N_QUADS, pool)
        assert isinstance(error, RdfSyntaxError)
        # the elements before the bad line; the one it follows, e1999, is not complete: the line might be its own
        assert len(elements) == 1999
        assert str(elements[-1].graph) == "<http://a/e1998>"
        assert "element 2000" in str(error)


def test_a_prefix_redefined_in_a_segment_the_fast_path_gives_up_on_applies_only_after_it(
        processes: FramingProcesses) -> None:
    """Segment 1 declares ex: as http://a/. Segment 2 uses it, redefines it as http://b/, uses it again, then repeats
    a graph name (refused). The precise path frames segment 2 again: its first elements are still http://a/ ones."""
    def element(name: str, n: int) -> str:
        return (f'ex:{name} {{ _:s{n} <http://ex/v> {n} . }}\n'
                f'ex:{name} <{PROV}> "2026-01-01T00:00:00.{n:06d}Z"^^<{XSD}dateTime> .\n')

    first = "@prefix ex: <http://a/> .\n" + "".join(element(f"e{n}", n) for n in range(3000))
    assert len(first) > 2 * (1 << 17)  # more than one segment before the redefinition
    second = (element("x1", 3001) + "@prefix ex: <http://b/> .\n" + element("x2", 3002)
              + element("x3", 3003).replace("ex:x3", "<http://a/x1>"))
    for pool in (processes, None):
        elements, error = framed_until_error((first + second).encode(), RdfFormat.TRIG, pool)
        assert isinstance(error, ElementRejected), error
        assert "<http://a/x1>" in str(error)
        assert [str(e.graph) for e in elements[-3:]] == ["<http://a/e2999>", "<http://a/x1>", "<http://b/x2>"]
        assert len(elements) == 3002


def test_a_framing_process_that_dies_is_replaced_and_its_segment_framed_here(processes: FramingProcesses) -> None:
    body = nquads(0, 1000).encode()
    frame(body, RdfFormat.N_QUADS, processes)  # starts the process
    (started,) = processes._started  # noqa: SLF001 - the process to kill
    started.process.kill()
    started.process.wait()
    elements = frame(body, RdfFormat.N_QUADS, processes)
    assert len(elements) == 1000 and str(elements[-1].graph) == "<http://a/e999>"
    assert processes.status()["processes"] == 1  # a new one
    assert processes._started[0].process.pid != started.process.pid  # noqa: SLF001


def test_no_framing_process_outlives_a_killed_server_process() -> None:
    script = textwrap.dedent(f"""
        import io, sys
        from pyoxigraph import RdfFormat
        from store.canonical import FramingProcesses
        from store.framing import ElementFramer
        from tests.test_framing_processes import nquads
        pool = FramingProcesses(2)
        body = nquads(0, 500).encode()
        list(ElementFramer(io.BytesIO(body), RdfFormat.N_QUADS, {PROV!r}, segments=pool))
        print(*[p.process.pid for p in pool._started], flush=True)
        sys.stdin.read()
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert parent.stdout is not None
    pids = [int(pid) for pid in parent.stdout.readline().split()]
    assert pids, "no framing process was started"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_uploads_wait_for_a_framing_process_only_when_every_one_is_taken(processes: FramingProcesses) -> None:
    """One process: one upload alone never waits for it; two uploads framed in step take turns, and the second
    waits while the first holds it (from its segment's submission until it takes the answer)."""
    body = nquads(0, 3000).encode()
    assert len(frame(body, RdfFormat.N_QUADS, processes)) == 3000
    assert processes.status()["wait_seconds"] == 0
    first = ElementFramer(io.BytesIO(body), RdfFormat.N_QUADS, PROV, segments=processes).batches()
    second = ElementFramer(io.BytesIO(body.replace(b"http://a/", b"http://b/")), RdfFormat.N_QUADS, PROV,
                           segments=processes).batches()
    next(first)  # holds the process: its second segment is submitted while the first one's elements are given out
    waiter = threading.Thread(target=lambda: sum(len(batch) for batch in second))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive()  # waiting for the process
    assert sum(len(batch) for batch in first) > 0
    waiter.join(timeout=10)
    assert not waiter.is_alive()
    assert processes.status()["wait_seconds"] >= 0.25
