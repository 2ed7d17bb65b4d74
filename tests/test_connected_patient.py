"""The connected-patient scenario (examples/connected-patient/) end to end on a real server:
HTTP upload, Spark windows, the alert rule with its two SERVICE ?var inputs discovered from the base data,
and the chained care-team rule over the alert stream. It runs on the test worker's shared Spark server
(tests/conftest.py): its streams, rules and outputs are the example's names, which no other test uses.

Expected values are the example's worked case (its README), by hand: pat2 was born in 1950 (66 in 2016: midaged, age
factor 1.0); history 63, 77, 63, 77 → baseline 70, relative deviation 7/70 = 0.1; maximum energy
expenditure 5 in the activity window → low (0 ≤ 5 < 10·1.0), activity factor 0.7; threshold
70·(1 + 1.1·0.7) = 123.9 bpm. Heart-rate window [10:00, 10:05) holds 125 and 135 (average 130 > 123.9:
one alert, effective at its latest reading, 10:02); window [10:05, 10:10) holds 115 and 125 (average
120: no alert).

The example's rule slides 5-minute heart-rate windows every 30 s; here they are made tumbling
(``R/HEAD/PT05M``) so that each reading is in exactly one window and "one alert per window" is checkable.
The activity stream is read through the one-shot window ``HEAD/-PT05M`` (the last 5 minutes of it).
"""

from __future__ import annotations

import importlib.util
import time
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import isodate
import pytest
import requests

from conformance.server import RunningServer

pytestmark = pytest.mark.jvm  # Spark (or Jena): left out by make test-fast

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "connected-patient"
LR = "http://localhost/local-records#"
OBS = "http://hl7/org/fhir/Observation."
XSD = "http://www.w3.org/2001/XMLSchema#"
STREAMS = {  # stream name -> alias (the stream ID in base.trig)
    "hr-pat2": "urn:uuid:6f1c5d1e-2b7a-4c1e-9a51-000000000201",
    "activity-pat2": "urn:uuid:6f1c5d1e-2b7a-4c1e-9a51-000000000202",
    "hr-pat3": "urn:uuid:6f1c5d1e-2b7a-4c1e-9a51-000000000301",
    "activity-pat3": "urn:uuid:6f1c5d1e-2b7a-4c1e-9a51-000000000302",
}
SPARQL_QUERY = {"Content-Type": "application/sparql-query", "Accept": "application/sparql-results+json"}


def load_generator() -> ModuleType:
    """examples/connected-patient/generate.py (not a package: the example is meant to be copied)."""
    spec = importlib.util.spec_from_file_location("connected_patient_generate", EXAMPLE / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rule(name: str) -> str:
    text = (EXAMPLE / "rules" / f"{name}.rq").read_text(encoding="utf-8")
    return text.replace("?WINDOWS=R/HEAD/PT05M/PT30S", "?WINDOWS=R/HEAD/PT05M")


def _rule_status(server: RunningServer, name: str) -> dict[str, Any]:
    response = requests.get(f"{server.url}/rules/{name}", headers={"Accept": "application/json"}, timeout=10)
    assert response.ok, response.text
    return response.json()  # type: ignore[no-any-return]


def _wait(server: RunningServer, name: str, done: Any, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + 90
    status = _rule_status(server, name)
    while not done(status) and time.monotonic() < deadline:
        assert status["failures"] == 0, (status, server.log_tail())
        time.sleep(0.3)
        status = _rule_status(server, name)
    assert done(status), (what, status, server.log_tail())
    return status


def _upload(server: RunningServer, stream: str, body: str, punctuation: str) -> None:
    response = requests.post(f"{server.url}/streams/{stream}", data=body.encode(),
                             headers={"Content-Type": "application/trig"}, timeout=30)
    assert response.ok, response.text
    response = requests.post(f"{server.url}/streams/{stream}", params={"punctuation": punctuation}, timeout=30)
    assert response.ok, response.text


def _select(server: RunningServer, stream: str, query: str) -> list[dict[str, str]]:
    response = requests.post(f"{server.url}/streams/{stream}", data=query, headers=SPARQL_QUERY, timeout=30)
    assert response.ok, response.text
    return [{k: v["value"] for k, v in b.items()} for b in response.json()["results"]["bindings"]]


def test_alert_for_the_130_bpm_window_only_and_a_chained_page(spark_server: RunningServer) -> None:
    generate = load_generator()
    server = spark_server
    base = server.url
    hits_before = requests.get(f"{base}/status", timeout=10).json()["static_cache"]["hits"]
    response = requests.post(f"{base}/store", data=(EXAMPLE / "base.trig").read_bytes(),
                             headers={"Content-Type": "application/trig"}, timeout=30)
    assert response.ok, response.text
    for name, alias in STREAMS.items():
        assert requests.put(f"{base}/streams/{name}", params={"alias": alias}, timeout=10).ok
    for name, output in (("heart-rate-alert", "alerts"), ("care-team-page", "pages")):
        response = requests.put(f"{base}/rules/{name}", params={"output": output}, data=_rule(name),
                                headers={"Content-Type": "application/sparql-query"}, timeout=30)
        assert response.status_code == 201, response.text
    alert = _rule_status(server, "heart-rate-alert")
    # both patients' heart-rate streams, found through the SERVICE ?var prefix; the activity streams are read
    # through one-shot windows (HEAD/-PT05M): not inputs, they do not fire the rule
    assert [(i["stream"], i["windows"]) for i in alert["inputs"]] == [("hr-pat2", "R/HEAD/PT5M"),
                                                                      ("hr-pat3", "R/HEAD/PT5M")]
    assert alert["discovers_inputs"]

    start = isodate.parse_datetime("2016-06-20T10:00:00Z")
    minute = timedelta(minutes=1)
    activity = "".join(generate.element("activity", start + k * minute, v) for k, v in ((0, 5), (2, 4)))
    _upload(server, "activity-pat2", activity, "2016-06-20T10:05:00Z")  # max energy 5 in (10:00, 10:05]

    readings = ((0, 125), (2, 135), (5, 115), (7, 125))
    heart_rate = "".join(generate.element("heart-rate", start + k * minute, v) for k, v in readings)
    _upload(server, "hr-pat2", heart_rate, "2016-06-20T10:10:00Z")
    status = _wait(server, "heart-rate-alert", lambda s: s["firings"] >= 2, "two heart-rate firings")
    assert status["firings"] == 2 and status["outputs"] == 1 and status["failures"] == 0, status

    alerts = _select(server, "alerts", f"""
        PREFIX obs: <{OBS}> PREFIX lr: <{LR}>
        SELECT ?element ?time ?obs ?patient ?effective ?avg ?threshold WHERE {{
          ?element <http://www.w3.org/ns/prov#generatedAtTime> ?time .
          GRAPH ?element {{ ?obs a <http://hl7/org/fhir/Observation> ; obs:subject ?patient ;
                                 obs:code lr:AbnormallyHighHeartRate ; obs:effectiveDateTime ?effective ;
                                 obs:valueQuantity [ <http://hl7/org/fhir/Quantity.value> ?avg ] ;
                                 lr:threshold ?threshold }} }}""")
    assert len(alerts) == 1, alerts
    [found] = alerts
    assert found["patient"] == f"{LR}pat2"
    assert found["effective"] == "2016-06-20T10:02:00Z"  # the window's latest reading
    assert float(found["avg"]) == 130 and float(found["threshold"]) == 123.9
    assert found["time"] == "2016-06-20T10:05:00Z"  # the element's timestamp: the window's end
    assert requests.get(f"{base}/streams/alerts", timeout=10).json()["elements"] == 1

    # the chained rule windows the alert stream one element at a time and pages pat2's ward nurse
    _wait(server, "care-team-page", lambda s: s["outputs"] >= 1, "the chained page")
    pages = _select(server, "pages", f"""
        PREFIX lr: <{LR}>
        SELECT ?to ?about ?alert ?at ?time WHERE {{
          ?p <http://www.w3.org/ns/prov#generatedAtTime> ?time .
          GRAPH ?p {{ ?p a lr:Page ; lr:to ?to ; lr:about ?about ; lr:alert ?alert ; lr:at ?at }} }}""")
    # timestamp: its count window's last element's, the alert's (stream time, so a replay gives the same)
    assert pages == [{"to": f"{LR}nurse-ada", "about": f"{LR}pat2", "alert": found["obs"],
                      "at": "2016-06-20T10:02:00Z", "time": "2016-06-20T10:05:00Z"}]

    status_json = requests.get(f"{base}/status", timeout=10).json()
    # the static prefixes (patients, sensors, history) were evaluated once per dataset revision, then reused
    assert status_json["static_cache"]["hits"] - hits_before >= 2, (hits_before, status_json["static_cache"])
    assert status_json["rules"]["heart-rate-alert"]["outputs"] == 1
