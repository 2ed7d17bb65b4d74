"""Heart-rate and activity streams for the connected-patient example, as TriG elements.

Each element is a named graph holding one FHIR-style observation plus its timestamp triple
(``<element> prov:generatedAtTime "…"^^xsd:dateTime``), as the concentrator's stream upload expects::

    python generate.py heart-rate --start 2016-06-20T10:00:00Z --every PT30S --values 125,135 > hr.trig
    python generate.py activity --start 2016-06-20T10:00:00Z --every PT1M --values 5,4,5,3 --repeat --count 20
    python generate.py heart-rate --values 72,75,130 --repeat --realtime 1 --post http://127.0.0.1:8080/streams/hr-pat2

``--values`` is a comma-separated list used in turn (``--repeat`` cycles it forever). ``--realtime N`` stamps
elements with the current time and sends N per second; ``--post URL`` uploads them in one chunked request, each
element committed as it arrives.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta

import isodate
import requests

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DATETIME = "http://www.w3.org/2001/XMLSchema#dateTime"
OBS = "http://hl7/org/fhir/Observation."
FHIR = "http://hl7/org/fhir/"
LR = "http://localhost/local-records#"
KINDS = {"heart-rate": (f"{LR}HeartRate", "bpm"), "activity": (f"{LR}EnergyExpenditure", "kcal/min")}


def stamp(moment: datetime) -> str:
    # microseconds: live readings a fraction of a second apart must keep distinct, increasing timestamps
    return f'"{moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")}"^^<{XSD_DATETIME}>'


def element(kind: str, moment: datetime, value: float) -> str:
    """One element: an observation of ``kind`` ('heart-rate' or 'activity') at ``moment``."""
    code, unit = KINDS[kind]
    graph = f"<urn:uuid:{uuid.uuid4()}>"
    return (f"{graph} <{PROV}> {stamp(moment)} .\n"
            f"{graph} {{ [] a <http://hl7.org/fhir/Observation> ; <{OBS}code> <{code}> ;\n"
            f"    <{OBS}effectiveDateTime> {stamp(moment)} ;\n"
            f'    <{OBS}valueQuantity> [ <{FHIR}Quantity.value> {value} ; <{FHIR}Quantity.unit> "{unit}" ] . }}\n')


def elements(kind: str, values: Iterable[float], start: datetime, every: timedelta) -> Iterator[str]:
    """Elements at start, start + every, … (application time: replays give the same windows)."""
    for index, value in enumerate(values):
        yield element(kind, start + index * every, value)


def realtime(kind: str, values: Iterable[float], per_second: float) -> Iterator[str]:
    """Elements stamped with the current time, ``per_second`` of them each second."""
    for value in values:
        yield element(kind, datetime.now(UTC), value)
        time.sleep(1 / per_second)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=sorted(KINDS))
    parser.add_argument("--values", required=True, help="comma-separated readings, used in turn")
    parser.add_argument("--repeat", action="store_true", help="cycle the values (forever, or --count times)")
    parser.add_argument("--count", type=int, help="stop after this many elements")
    parser.add_argument("--start", default="2016-06-20T10:00:00Z", help="time of the first element")
    parser.add_argument("--every", default="PT30S", help="ISO 8601 duration between elements")
    parser.add_argument("--realtime", type=float, metavar="N", help="stamp with the current time, N elements/s")
    parser.add_argument("--post", metavar="URL", help="upload to this stream URL instead of printing")
    args = parser.parse_args(argv)
    values: Iterable[float] = [float(v) if "." in v else int(v) for v in args.values.split(",")]
    if args.repeat:
        values = itertools.cycle(values)
    if args.count is not None:
        values = itertools.islice(values, args.count)
    if args.realtime:
        body = realtime(args.kind, values, args.realtime)
    else:
        body = elements(args.kind, values, isodate.parse_datetime(args.start), isodate.parse_duration(args.every))
    if args.post:
        response = requests.post(args.post, data=(text.encode() for text in body),
                                 headers={"Content-Type": "application/trig"}, timeout=None)
        print(response.status_code, response.text.strip(), file=sys.stderr)
        return 0 if response.ok else 1
    try:
        for text in body:
            sys.stdout.write(text)
            sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped early (e.g. `| head`): not an error of ours
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
