"""The web console (issue 17) in a real headless Chromium (Debian's ``chromium``, driven by Playwright) against a
real server: open it from ``/``, create a stream, upload elements, watch a window and a rule output appear live, run
a query and see its table, see a syntax error's line and column, stay read-only without the write token, and work
from the keyboard. Expected values are worked out by hand from what each test uploads.

``CONCENTRATOR_SCREENSHOTS=1`` writes a screenshot of each view into ``docs/console/`` (docs/console.md shows them);
without it they go to the test's temporary directory, so the suite does not rewrite files."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from conformance.server import REPO_ROOT, RunningServer, running_server

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
INSTALL = "bash .ci/install-clients (it runs apt-get install chromium)"
# Chromium as the machine's closed network needs it: no sandbox (root in CI), no GPU, no background connections.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = REPO_ROOT / "docs" / "console"

PROV = "http://www.w3.org/ns/prov#generatedAtTime"
XSD_DT = "http://www.w3.org/2001/XMLSchema#dateTime"


def reading(name: str, minute: int, second: int, value: int) -> str:
    return (f'<http://ex/{name}> <{PROV}> "2016-06-20T10:{minute:02d}:{second:02d}Z"^^<{XSD_DT}> .\n'
            f'<http://ex/{name}> {{ <http://ex/o-{name}> <http://ex/hr> {value} . }}\n')


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI never skips: .ci/install-clients must install it)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed: pip install -c constraints.txt -e '.[test]'")
    if not Path(CHROMIUM).exists():
        _missing(f"Debian's chromium is not installed: {INSTALL}")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))
    yield opened
    context.close()
    assert not problems, f"the console's script failed: {problems}"


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server(["--no-pipeline"]) as running:
        yield running


def screenshot(page: Any, name: str, tmp_path: Path) -> None:
    """A picture of the view for docs/console.md, written there only when asked (CONCENTRATOR_SCREENSHOTS=1)."""
    folder = SCREENSHOTS if os.environ.get("CONCENTRATOR_SCREENSHOTS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def upload(server: RunningServer, stream: str, body: str) -> None:
    assert requests.put(f"{server.url}/streams/{stream}", timeout=10).status_code in (201, 204)
    answer = requests.post(f"{server.url}/streams/{stream}", data=body, headers={"Content-Type": "application/trig"},
                           timeout=10)
    assert answer.status_code == 200, answer.text


# -- without Spark ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_home_page_links_to_the_console(server: RunningServer, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(server.url + "/")
    page.get_by_role("link", name="Open the console").click()
    expect(page).to_have_url(f"{server.url}/console")
    expect(page.get_by_role("heading", name="Streams", level=1)).to_be_visible()
    expect(page).to_have_title("Streams — concentrator console")


def test_create_a_stream_and_upload_elements(server: RunningServer, page: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page.goto(server.url + "/console")
    page.locator("#stream-name").fill("heart")
    page.get_by_role("button", name="Create stream").click()
    expect(page.locator("#streams-message")).to_have_text("Stream heart created.")
    row = page.locator('#streams-table tr[data-stream="heart"]')
    expect(row).to_be_visible()
    # three readings a minute apart, one with a language-tagged literal that must come back as it was sent
    body = (reading("h1", 0, 0, 70) + reading("h2", 1, 0, 72)
            + f'<http://ex/h3> <{PROV}> "2016-06-20T10:02:00Z"^^<{XSD_DT}> .\n'
              '<http://ex/h3> { <http://ex/o-h3> <http://ex/hr> 74 ; <http://ex/note> "ruhig"@de . }\n')
    page.locator("#upload-stream").select_option("heart")
    page.get_by_label("Elements", exact=True).fill(body)
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#streams-message")).to_have_text(
        "3 element(s) committed to heart: HEAD is element 3, stream time 2016-06-20T10:02:00Z.")
    expect(row.locator("td").nth(0)).to_have_text("3")  # elements
    expect(row.locator("td").nth(2)).to_have_text("2016-06-20T10:02:00Z")  # stream time
    expect(row.locator("svg.spark")).to_have_attribute("aria-label", re.compile(r"^elements per second over the last"))
    screenshot(page, "streams", tmp_path)
    # the server holds them, the literal unaltered
    stored = requests.get(f"{server.url}/streams/heart", params={"WINDOWS": "HEAD~2/HEAD"},
                          headers={"Accept": "application/n-quads"}, timeout=10).text
    assert '<http://ex/o-h3> <http://ex/note> "ruhig"@de <http://ex/h3> .' in stored
    assert requests.get(f"{server.url}/streams/heart", headers={"Accept": "application/json"},
                        timeout=10).json()["elements"] == 3


def test_a_refused_upload_says_why_and_keeps_what_was_there(server: RunningServer, page: Any) -> None:
    from playwright.sync_api import expect

    upload(server, "refusals", reading("r1", 0, 30, 60))
    page.goto(server.url + "/console")
    page.locator("#upload-stream").select_option("refusals")
    page.get_by_label("Elements", exact=True).fill(reading("r0", 0, 10, 61))  # before stream time 10:00:30
    page.get_by_role("button", name="Upload").click()
    message = page.locator("#streams-message")
    expect(message).to_contain_text("The upload to refusals was refused (0 element(s) before it were committed): 409")
    expect(message).to_contain_text("is not after the stream time 2016-06-20T10:00:30Z")
    assert requests.get(f"{server.url}/streams/refusals", headers={"Accept": "application/json"},
                        timeout=10).json()["elements"] == 1


def test_a_query_shows_its_table(server: RunningServer, page: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    upload(server, "pulse", reading("p1", 0, 0, 61) + reading("p2", 0, 20, 65) + reading("p3", 0, 40, 69))
    page.goto(server.url + "/console#query")
    expect(page.get_by_role("heading", name="Query", level=1)).to_be_visible()
    page.get_by_label("Endpoint").select_option("/streams/pulse")
    # WINDOWS at a stream IRI: the last two elements (HEAD~1 and HEAD) are p2 and p3
    page.get_by_label("Query text").fill(
        "SELECT ?o ?v WHERE {\n  WINDOWS HEAD~1/HEAD { GRAPH ?g { ?o <http://ex/hr> ?v } }\n} ORDER BY ?v")
    page.get_by_role("button", name="Run query").click()
    table = page.locator("#query-results table")
    expect(table.locator("caption")).to_have_text("Results: 2 solution(s)")
    expect(table.locator("thead th")).to_have_text(["?o", "?v"])
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table.locator("tbody tr").nth(0).locator("td")).to_have_text(
        ["<http://ex/o-p2>", "65 ^^<http://www.w3.org/2001/XMLSchema#integer>"])
    expect(table.locator("tbody tr").nth(1).locator("td")).to_have_text(
        ["<http://ex/o-p3>", "69 ^^<http://www.w3.org/2001/XMLSchema#integer>"])
    expect(page.locator("#query-status")).to_contain_text("2 solution(s)")
    screenshot(page, "query", tmp_path)
    # REVISION on the dataset: after revision 1 the graph held "one", after revision 2 "two"
    for word in ("one", "two"):
        assert requests.put(f"{server.url}/store", params={"graph": "http://ex/doc"}, timeout=10,
                            data=f'<http://ex/doc> <http://ex/says> "{word}" .',
                            headers={"Content-Type": "text/turtle"}).status_code in (201, 204)
    page.get_by_label("Endpoint").select_option("/sparql")
    page.get_by_label("Query text").fill(
        "SELECT ?said WHERE { REVISION HEAD~1 { GRAPH <http://ex/doc> { ?d <http://ex/says> ?said } } }")
    page.keyboard.press("Control+Enter")
    expect(page.locator("#query-results table tbody td")).to_have_text(["one"])


def test_a_syntax_error_shows_its_line_and_column_next_to_the_query(server: RunningServer, page: Any,
                                                                    tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page.goto(server.url + "/console#query")
    text = "SELECT ?v WHERE {\n  WINDOWS HEAD~/PT05M { ?o <http://ex/hr> ?v }\n}"
    page.get_by_label("Query text").fill(text)
    page.get_by_role("button", name="Run query").click()
    error = page.get_by_role("alert")
    # the bad WindowRef starts on line 2 after two spaces, "WINDOWS" and a space: column 11
    expect(error.locator(".where")).to_have_text("Line 2, column 11")
    expect(error.locator(".message-text")).to_contain_text("line 2 column 11")
    expect(error.locator(".message-text")).to_contain_text("'HEAD~' is not a revision")
    excerpt = error.locator("pre.excerpt").text_content()
    assert excerpt == "2 |   WINDOWS HEAD~/PT05M { ?o <http://ex/hr> ?v }\n" + " " * (len("2 | ") + 10) + "^"
    area = page.get_by_label("Query text")
    expect(area).to_have_attribute("aria-invalid", "true")
    expect(area).to_have_attribute("aria-describedby", "query-error query-keys")
    offset = len("SELECT ?v WHERE {\n") + 10  # the caret sits on the "H" of HEAD~
    assert area.evaluate("a => [a.selectionStart, a.selectionEnd]") == [offset, offset]
    expect(page.locator("#query-results")).to_be_empty()
    screenshot(page, "query-error", tmp_path)


def test_keyboard_only_and_labelled(server: RunningServer, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(server.url + "/console")
    # landmarks, and every control named by a label
    assert page.locator("header").count() == 1 and page.locator("main").count() == 1
    expect(page.get_by_role("navigation", name="Console views")).to_be_visible()
    unlabelled = page.evaluate("""() => Array.from(document.querySelectorAll('input, select, textarea'))
        .filter(c => c.labels.length === 0).map(c => c.id)""")
    assert unlabelled == []
    # focus order: the skip link first, then the token field, then the views
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to the current view")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="RDF stream concentrator")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_label("Write token")).to_be_focused()
    for _ in range(40):  # on to the Query view's link, by keyboard only
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent") == "Query":
            break
    page.keyboard.press("Enter")
    heading = page.get_by_role("heading", name="Query", level=1)
    expect(heading).to_be_focused()  # the view's heading takes focus: a screen reader announces the new view
    expect(page.get_by_role("link", name="Query", exact=True)).to_have_attribute("aria-current", "page")
    expect(page.locator("#view-streams")).to_be_hidden()
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    expect(page.get_by_label("Query text")).to_be_focused()
    page.keyboard.type(" ")
    page.keyboard.press("Control+Enter")
    expect(page.locator("#query-status")).to_contain_text("Done")


@pytest.mark.slow
def test_without_the_token_the_console_is_read_only(page: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    with running_server(["--no-pipeline", "--token", "s3cret"]) as secured:
        page.goto(secured.url + "/console")
        expect(page.locator("#access")).to_have_text(
            "Read-only: this server needs a write token for changes. Enter it above to create streams, upload and "
            "register rules.")
        expect(page.get_by_role("button", name="Create stream")).to_be_disabled()
        expect(page.get_by_role("button", name="Upload")).to_be_disabled()
        screenshot(page, "read-only", tmp_path)
        # a wrong token: the form opens, the server refuses, nothing is created
        page.get_by_label("Write token").fill("wrong")
        page.get_by_role("button", name="Use token").click()
        expect(page.get_by_role("button", name="Create stream")).to_be_enabled()
        page.locator("#stream-name").fill("guarded")
        page.get_by_role("button", name="Create stream").click()
        expect(page.locator("#streams-message")).to_contain_text(
            "Stream guarded was not created: 401 (this needs a token the server knows): the bearer token is not one "
            "this server knows")
        assert requests.get(f"{secured.url}/streams", timeout=10).json()["streams"] == []
        # the right one
        page.get_by_label("Write token").fill("s3cret")
        page.get_by_role("button", name="Use token").click()
        page.locator("#stream-name").fill("guarded")
        page.get_by_role("button", name="Create stream").click()
        expect(page.locator("#streams-message")).to_have_text("Stream guarded created.")
        assert [s["name"] for s in requests.get(f"{secured.url}/streams", timeout=10).json()["streams"]] == ["guarded"]
        # kept for this tab only: a new tab of another session has no token
        other = page.context.browser.new_context().new_page()
        other.goto(secured.url + "/console")
        expect(other.get_by_role("button", name="Create stream")).to_be_disabled()
        other.context.close()


# -- with Spark: a window and a rule output appear live ------------------------------------------------------------

RULE = """CONSTRUCT { GRAPH ?e { ?e <http://ex/avg> ?avg } }
WHERE {
  SERVICE <streams/beat?WINDOWS=R/HEAD/PT01M> {
    SELECT (AVG(?v) AS ?avg) WHERE { GRAPH ?g { ?o <http://ex/hr> ?v } } }
  BIND (IRI(CONCAT('urn:avg:', STRUUID())) AS ?e)
}"""


@pytest.mark.jvm
def test_a_window_and_a_rule_output_appear_live(page: Any, tmp_path: Path, spark_server: RunningServer) -> None:
    from playwright.sync_api import expect

    spark = spark_server  # the shared server of this test worker (tests/conftest.py)
    assert requests.put(f"{spark.url}/streams/beat", timeout=10).status_code == 201
    page.goto(spark.url + "/console#rules")
    page.locator("#rule-name").fill("average")
    page.get_by_label("Output stream").fill("averages")
    page.get_by_label("CONSTRUCT query over windowed IRIs").fill(RULE)
    page.get_by_role("button", name="Register rule").click()
    expect(page.locator("#rules-message")).to_have_text("Rule average registered.")
    rule = page.locator('#rules-table tr[data-rule="average"]')
    expect(rule.locator("td").nth(2)).to_have_text("0")  # firings

    page.get_by_role("link", name="Live outputs").click()
    live = page.locator("#subscribe")
    live.get_by_label("Stream").select_option("beat")
    live.get_by_label("Windows").fill("R/HEAD/PT01M")
    live.get_by_label("Query on each window (optional)").fill(
        "SELECT (COUNT(?v) AS ?readings) (MAX(?v) AS ?highest) WHERE { GRAPH ?g { ?o <http://ex/hr> ?v } }")
    live.get_by_role("button", name="Follow").click()
    live.get_by_label("Stream").select_option("averages")
    live.get_by_label("Windows").fill("R/HEAD/HEAD/1")  # every output element as it comes
    live.get_by_label("Query on each window (optional)").fill("")
    live.get_by_role("button", name="Follow").click()
    beat = page.locator("article.subscription", has_text="beat")
    averages = page.locator("article.subscription", has_text="averages")
    expect(beat.locator("p.message")).to_contain_text("Waiting for the next window", timeout=30_000)
    expect(averages.locator("p.message")).to_contain_text("Waiting for the next window", timeout=30_000)

    # upload from the console: [10:00, 10:01) holds 70 and 80 and completes with the reading at 10:01:10
    page.get_by_role("link", name="Streams", exact=True).click()
    page.locator("#upload-stream").select_option("beat")
    page.get_by_label("Elements", exact=True).fill(reading("b1", 0, 0, 70) + reading("b2", 0, 30, 80)
                                       + reading("b3", 1, 10, 90))
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#streams-message")).to_contain_text("3 element(s) committed to beat")

    page.get_by_role("link", name="Live outputs").click()
    window = beat.locator('li[data-window="0"]')
    expect(window).to_be_visible(timeout=120_000)  # Spark starts in the background, then assigns the window
    expect(window.locator("h3")).to_have_text("Window 0 [2016-06-20T10:00:00Z, 2016-06-20T10:01:00Z)")  # its span
    expect(window.locator("thead th")).to_have_text(["?readings", "?highest"])
    expect(window.locator("tbody td")).to_have_text([
        "2 ^^<http://www.w3.org/2001/XMLSchema#integer>", "80 ^^<http://www.w3.org/2001/XMLSchema#integer>"])
    # the rule fired on that window: its output element (the average of 70 and 80) arrives as a window of its own
    output = averages.locator('li[data-window="0"]')
    expect(output).to_be_visible(timeout=60_000)
    expect(output.locator("h3")).to_have_text("Window 0 element 1")  # a count window: its element
    expect(output.locator("pre.document")).to_contain_text(
        '<http://ex/avg> "75"^^<http://www.w3.org/2001/XMLSchema#decimal>')
    screenshot(page, "live", tmp_path)

    page.get_by_role("link", name="Rules", exact=True).click()
    expect(rule.locator("td").nth(2)).to_have_text("1", timeout=10_000)  # firings
    expect(rule.locator("td").nth(3)).to_have_text("1")  # outputs
    expect(rule.locator("td").nth(4)).to_contain_text(" ms")  # last latency
    expect(rule.locator("td").nth(5)).to_have_text("0")  # failures
    expect(rule.locator("td").nth(6)).to_contain_text("none (last window: beat window 0")
    screenshot(page, "rules", tmp_path)

    # the streams view: beat's sequence and its latest window, [10:00, 10:01) with b1 and b2
    page.get_by_role("link", name="Streams", exact=True).click()
    beat_row = page.locator('#streams-table tr[data-stream="beat"]')
    expect(beat_row.locator("td").nth(0)).to_have_text("3")
    expect(beat_row.locator("td").nth(3)).to_have_text("R/HEAD/PT1M · 1 window")
    expect(beat_row.locator("td").nth(4)).to_have_text(
        "window 0: [2016-06-20T10:00:00Z, 2016-06-20T10:01:00Z), 2 elements")
    averages_row = page.locator('#streams-table tr[data-stream="averages"]')
    expect(averages_row.locator("td").nth(4)).to_have_text("window 0: stream element 1")  # a count window
    screenshot(page, "streams-windows", tmp_path)


@pytest.mark.slow
@pytest.mark.jvm
def test_with_a_read_token_a_live_output_follows_windows(page: Any) -> None:
    """A server with --read-token: the read token typed into the console opens its live outputs too (a browser's
    WebSocket sends it as access_token=, as no header can be set on one)."""
    from playwright.sync_api import expect

    writer, reader = {"Authorization": "Bearer w-s3cret"}, "r-s3cret"
    with running_server(["--token", "w-s3cret", "--read-token", reader]) as secured:
        assert requests.put(f"{secured.url}/streams/pulse", headers=writer, timeout=10).status_code == 201
        page.goto(secured.url + "/console")
        expect(page.locator("#access")).to_contain_text("This server needs a token to read")
        page.get_by_label("Write token").fill(reader)
        page.get_by_role("button", name="Use token").click()
        page.get_by_role("link", name="Live outputs").click()
        live = page.locator("#subscribe")
        live.get_by_label("Stream").select_option("pulse")  # listed: the read token reads /streams
        live.get_by_label("Windows").fill("R/HEAD/PT01M")
        live.get_by_label("Query on each window (optional)").fill(
            "SELECT (COUNT(?v) AS ?readings) (MAX(?v) AS ?highest) WHERE { GRAPH ?g { ?o <http://ex/hr> ?v } }")
        live.get_by_role("button", name="Follow").click()
        pulse = page.locator("article.subscription", has_text="pulse")
        expect(pulse.locator("p.message")).to_contain_text("Waiting for the next window", timeout=30_000)
        # [10:00, 10:01) holds 64 and 66; the reading at 10:01:05 completes it
        answer = requests.post(f"{secured.url}/streams/pulse", timeout=30,
                               data=reading("p1", 0, 0, 64) + reading("p2", 0, 40, 66) + reading("p3", 1, 5, 99),
                               headers={"Content-Type": "application/trig", **writer})
        assert answer.status_code == 200, answer.text
        window = pulse.locator('li[data-window="0"]')
        expect(window).to_be_visible(timeout=120_000)  # Spark starts in the background, then assigns the window
        expect(window.locator("h3")).to_have_text("Window 0 [2016-06-20T10:00:00Z, 2016-06-20T10:01:00Z)")
        expect(window.locator("tbody td")).to_have_text([
            "2 ^^<http://www.w3.org/2001/XMLSchema#integer>", "66 ^^<http://www.w3.org/2001/XMLSchema#integer>"])
        assert reader not in secured.log_tail(10_000)  # the URL's token is in no log


# -- with Spark: an RSP-QL query registered, listed, followed live and deleted ----------------------------------------

REGISTRATION = """PREFIX ex: <http://ex/>
REGISTER RSTREAM <http://ex/high> AS
SELECT ?o ?v
FROM NAMED WINDOW ex:w ON ex:rspql-heart [RANGE PT1M STEP PT1M]
WHERE { WINDOW ex:w { ?o ex:hr ?v FILTER(?v > 100) } }"""


@pytest.mark.slow
@pytest.mark.jvm
def test_an_rsp_ql_query_registered_listed_and_followed_live(page: Any, tmp_path: Path,
                                                             spark_server: RunningServer) -> None:
    from playwright.sync_api import expect

    spark = spark_server  # shared by this test worker: the stream and the query are named after this test
    assert requests.put(f"{spark.url}/streams/rspql-heart", params={"alias": "http://ex/rspql-heart"},
                        timeout=10).status_code == 201
    page.goto(spark.url + "/console#queries")
    expect(page.get_by_role("heading", name="Queries", level=1)).to_be_visible()
    form = page.locator("#register-query")
    form.get_by_label("Name").fill("console-high")
    form.get_by_label("RSP-QL or C-SPARQL query").fill(REGISTRATION)
    form.get_by_label("t0 (optional)").fill("2016-06-20T10:00:00Z")
    form.get_by_role("button", name="Register query").click()
    expect(page.locator("#queries-message")).to_have_text("Query console-high registered.")
    row = page.locator('#queries-table tr[data-query="console-high"]')
    expect(row.locator("th")).to_have_text("console-high")
    # [RANGE PT1M STEP PT1M] from t0 10:00: tumbling 1-minute windows of the stream the IRI aliases; the defaults
    # are seed 004's report policy (window close, non-empty content) and RStream
    expect(row.locator("td")).to_have_text(["RSP-QL SELECT", "rspql-heart R/2016-06-20T10:00:00Z/PT1M",
                                            "non-empty-content,window-close · rstream", "Follow results", "Delete"])

    row.get_by_role("button", name="Follow results of console-high").click()
    panel = page.locator("#registration-subscriptions article.subscription")
    expect(panel.locator("h2")).to_have_text("Results of console-high")
    expect(panel.locator("p.message")).to_contain_text("Waiting for the next window", timeout=30_000)

    # [10:00, 10:01) holds 95 and 120 and completes with the reading at 10:01:10; only 120 passes the FILTER
    page.get_by_role("link", name="Streams", exact=True).click()
    page.locator("#upload-stream").select_option("rspql-heart")
    page.get_by_label("Elements", exact=True).fill(reading("q1", 0, 0, 95) + reading("q2", 0, 30, 120)
                                                   + reading("q3", 1, 10, 130))
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#streams-message")).to_contain_text("3 element(s) committed to rspql-heart")

    page.get_by_role("link", name="Queries", exact=True).click()
    window = panel.locator('li[data-window="0"]')
    expect(window).to_be_visible(timeout=120_000)  # Spark assigns the window, then the query is evaluated on it
    expect(window.locator("h3")).to_have_text("Window 0 [2016-06-20T10:00:00Z, 2016-06-20T10:01:00Z)")
    expect(window.locator("thead th")).to_have_text(["?o", "?v"])
    expect(window.locator("tbody tr")).to_have_count(1)
    expect(window.locator("tbody td")).to_have_text(
        ["<http://ex/o-q2>", "120 ^^<http://www.w3.org/2001/XMLSchema#integer>"])
    screenshot(page, "queries", tmp_path)

    row.get_by_role("button", name="Delete query console-high").click()
    expect(page.locator("#queries-message")).to_have_text("Query console-high deleted.")
    expect(row).to_have_count(0)
    expect(panel.locator("p.message")).to_have_text("The query was deleted: no more windows.")
    expect(page.get_by_role("heading", name="Queries", level=1)).to_be_focused()
    assert requests.get(f"{spark.url}/queries/console-high", timeout=10).status_code == 404
