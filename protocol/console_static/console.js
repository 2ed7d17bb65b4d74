// The concentrator's web console (docs/console.md). Plain JavaScript, no build step, no library: it reads what
// any HTTP client reads (/status, /streams, /rules, /queries, windowed IRIs and registered queries' results over
// WebSockets, /sparql) and writes with the token the user gives it (kept in sessionStorage: gone when the tab
// closes).
"use strict";

const TOKEN_KEY = "concentrator.write-token";
const REFRESH_MS = 2000;
const LIVE_KEPT = 50; // windows shown per subscription, newest first
const VIEWS = { streams: "Streams", rules: "Rules", queries: "Queries", live: "Live outputs", query: "Query" };

const state = {
  access: { token_required: false, read_only: false },
  streams: [],
  view: "streams",
  timer: null,
  subscriptions: 0,
  queriesShown: "", // the /queries document the table shows
};

const $ = (selector, root = document) => root.querySelector(selector);

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// -- access: the token and what the server allows ------------------------------------------------------------

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function writeHeaders(extra = {}) {
  const headers = { ...extra };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  return headers;
}

function canWrite() {
  return !state.access.read_only && (!state.access.token_required || token() !== "");
}

function showAccess() {
  const writable = canWrite();
  for (const control of document.querySelectorAll("fieldset.writes, button.writes")) control.disabled = !writable;
  let text;
  if (state.access.read_token_required && !token()) {
    text = "This server needs a token to read: enter its read token (or the write token) above.";
  } else if (state.access.read_only) text = "This server is read-only: the console only reads.";
  else if (state.access.token_required && !token()) {
    text = "Read-only: this server needs a write token for changes. Enter it above to create streams, upload " +
      "and register rules.";
  } else if (token()) text = "Writes are sent with the token you gave (kept in this tab only).";
  else text = "This server takes writes without a token.";
  $("#access").textContent = text;
  $("#forget-token").disabled = !token();
}

async function readAccess() {
  try {
    const status = await getJson("/status");
    state.access = status.access || state.access;
  } catch (error) {
    $("#access").textContent = `The server does not answer: ${error.message}`;
    return;
  }
  showAccess();
}

// -- HTTP -----------------------------------------------------------------------------------------------------

class HttpError extends Error {
  constructor(status, text, headers) {
    super(text.trim() || `HTTP ${status}`);
    this.status = status;
    this.headers = headers;
  }
}

async function getJson(url) {
  const response = await fetch(url, { headers: writeHeaders({ Accept: "application/json" }) });  // a read token too
  if (!response.ok) throw new HttpError(response.status, await response.text(), response.headers);
  return response.json();
}

async function send(method, url, body, contentType, accept) {
  const headers = writeHeaders(contentType ? { "Content-Type": contentType } : {});
  if (accept) headers.Accept = accept;
  const response = await fetch(url, { method, headers, body });
  if (!response.ok) throw new HttpError(response.status, await response.text(), response.headers);
  return response;
}

function describeError(error) {
  if (!(error instanceof HttpError)) return `The request failed: ${error.message}`;
  const why = { 401: " (this needs a token the server knows)", 403: " (refused: a token without this right, or a read-only server)" };
  return `${error.status}${why[error.status] || ""}: ${error.message}`;
}

function say(id, text, isError = false) {
  const node = $(id);
  node.textContent = text;
  node.classList.toggle("failed", isError);
}

// -- views ----------------------------------------------------------------------------------------------------

function showView(name, moveFocus) {
  if (!(name in VIEWS)) name = "streams";
  state.view = name;
  for (const view of Object.keys(VIEWS)) $(`#view-${view}`).hidden = view !== name;
  for (const link of document.querySelectorAll("nav a[data-view]")) {
    if (link.dataset.view === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.title = `${VIEWS[name]} — concentrator console`;
  if (moveFocus) $(`#${name}-heading`).focus();
  refresh();
}

function refresh() {
  clearTimeout(state.timer);
  if (document.hidden) { // a tab in the background asks nothing; it refreshes when shown again
    state.timer = setTimeout(refresh, REFRESH_MS);
    return;
  }
  const work = { streams: refreshStreams, rules: refreshRules, queries: refreshQueries, live: refreshStreamList,
    query: refreshStreamList };
  work[state.view]().finally(() => {
    state.timer = setTimeout(refresh, REFRESH_MS);
  });
}

// -- streams --------------------------------------------------------------------------------------------------

async function refreshStreamList() {
  try {
    state.streams = (await getJson("/streams")).streams;
  } catch {
    return;
  }
  fillStreamChoices();
}

function fillStreamChoices() {
  const names = state.streams.map((s) => s.name);
  for (const select of document.querySelectorAll("select.stream-choice")) {
    const chosen = select.value;
    const current = Array.from(select.options, (o) => o.value);
    if (current.join("\n") !== names.join("\n")) {
      select.replaceChildren(...names.map((n) => element("option", { value: n, text: n })));
      if (names.includes(chosen)) select.value = chosen;
    }
  }
  const target = $("#query-target");
  const wanted = ["/sparql", ...names.map((n) => `/streams/${n}`)];
  if (Array.from(target.options, (o) => o.value).join("\n") !== wanted.join("\n")) {
    const chosen = target.value;
    target.replaceChildren(element("option", { value: "/sparql", text: "/sparql: the dataset" }),
      ...names.map((n) => element("option", { value: `/streams/${n}`, text: `/streams/${n}: stream ${n}` })));
    if (wanted.includes(chosen)) target.value = chosen;
  }
}

async function refreshStreams() {
  await refreshStreamList();
  const body = $("#streams-table tbody");
  body.replaceChildren(...state.streams.map(streamRow));
  $("#streams-empty").hidden = state.streams.length > 0;
}

function plural(count, noun) {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}

// A window's bounds: a time window [start, end) in stream time; a count window by its elements' ordinals.
function bounds(window) {
  if (typeof window.start === "number") {
    return window.start === window.end ? `element ${window.start}` : `elements ${window.start}–${window.end}`;
  }
  return `[${window.start}, ${window.end})`;
}

// A window in words: "window 0: [10:00, 10:01), 2 elements"; a count window "window 3: elements 4–6".
function windowSummary(window) {
  if (typeof window.start === "number") return `window ${window.index}: stream ${bounds(window)}`;
  return `window ${window.index}: ${bounds(window)}, ${plural(window.count, "element")}`;
}

function streamRow(stream) {
  const sequences = stream.sequences.length
    ? element("ul", { class: "plain" }, stream.sequences.map((s) =>
      element("li", {}, element("code", { text: s.ref }), ` · ${plural(s.windows_emitted, "window")}`)))
    : "none";
  const latest = stream.sequences.filter((s) => s.latest);
  const windows = latest.length
    ? element("ul", { class: "plain" }, latest.map((s) => element("li", { text: windowSummary(s.latest) })))
    : "none yet";
  return element("tr", { "data-stream": stream.name },
    element("th", { scope: "row" }, element("a", { href: `/streams/${encodeURIComponent(stream.name)}` ,
      text: stream.name })),
    element("td", { class: "number", text: stream.elements }),
    element("td", {}, sparkline(stream.rate_history), ` ${stream.rate_per_second} /s`),
    element("td", { class: "instant", text: stream.stream_time || "none yet" }),
    element("td", {}, sequences),
    element("td", {}, windows));
}

// The rate over the last minutes as a small SVG bar chart, with its numbers in a text alternative.
function sparkline(history) {
  const values = (history && history.per_second) || [];
  const period = (history && history.period_seconds) || 10;
  const peak = Math.max(...values, 0);
  const label = `elements per second over the last ${Math.round((values.length * period) / 60)} minutes, ` +
    `${period}-second steps: peak ${peak}, latest ${values.length ? values[values.length - 1] : 0}`;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  const width = 2 * values.length;
  svg.setAttribute("viewBox", `0 0 ${Math.max(width, 1)} 20`);
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const title = document.createElementNS(ns, "title");
  title.textContent = label;
  svg.append(title);
  values.forEach((value, i) => {
    const height = peak > 0 ? Math.max(1, (value / peak) * 20) : 0;
    if (!height) return;
    const bar = document.createElementNS(ns, "rect");
    bar.setAttribute("x", String(2 * i));
    bar.setAttribute("y", String(20 - height));
    bar.setAttribute("width", "1.6");
    bar.setAttribute("height", String(height));
    svg.append(bar);
  });
  return svg;
}

async function createStream(event) {
  event.preventDefault();
  const form = event.target;
  const name = form.elements.name.value.trim();
  const params = new URLSearchParams();
  for (const key of ["timestamp-predicate", "lateness"]) {
    const value = form.elements[key].value.trim();
    if (value) params.set(key, value);
  }
  const query = params.toString() ? `?${params}` : "";
  try {
    const response = await send("PUT", `/streams/${encodeURIComponent(name)}${query}`);
    say("#streams-message", response.status === 201 ? `Stream ${name} created.` : `Stream ${name} reconfigured.`);
    form.reset();
  } catch (error) {
    say("#streams-message", `Stream ${name} was not created: ${describeError(error)}`, true);
  }
  await refreshStreams();
}

async function upload(event) {
  event.preventDefault();
  const form = event.target;
  const name = form.elements.stream.value;
  try {
    const response = await send("POST", `/streams/${encodeURIComponent(name)}`, form.elements.body.value,
      form.elements.type.value);
    const answer = await response.json();
    say("#streams-message", `${answer.committed} element(s) committed to ${name}: HEAD is element ${answer.head}, ` +
      `stream time ${answer.stream_time}.`);
    form.elements.body.value = "";
  } catch (error) {
    const committed = error.headers && error.headers.get("Elements-Committed");
    const before = committed !== null && committed !== undefined ? ` (${committed} element(s) before it were committed)` : "";
    say("#streams-message", `The upload to ${name} was refused${before}: ${describeError(error)}`, true);
  }
  await refreshStreams();
}

async function punctuate(event) {
  event.preventDefault();
  const form = event.target;
  const name = form.elements.stream.value;
  const time = form.elements.time.value.trim();
  try {
    const response = await send("POST", `/streams/${encodeURIComponent(name)}?punctuation=${encodeURIComponent(time)}`);
    const answer = await response.json();
    say("#streams-message", `Stream time of ${name} is now ${answer.stream_time}.`);
  } catch (error) {
    say("#streams-message", `The punctuation was refused: ${describeError(error)}`, true);
  }
  await refreshStreams();
}

// -- rules ----------------------------------------------------------------------------------------------------

async function refreshRules() {
  let rules;
  try {
    rules = await getJson("/rules");
  } catch {
    return;
  }
  $("#rules-table tbody").replaceChildren(...rules.map(ruleRow));
  $("#rules-empty").hidden = rules.length > 0;
}

function ruleRow(rule) {
  const inputs = element("ul", { class: "plain" }, rule.inputs.map((i) =>
    element("li", {}, `${i.stream} `, element("code", { text: i.windows }))));
  const error = rule.last_error
    ? element("span", { class: "failed" }, rule.last_error, element("br"), `window: ${rule.last_window}`)
    : (rule.last_window ? `none (last window: ${rule.last_window})` : "none");
  return element("tr", { "data-rule": rule.name },
    element("th", { scope: "row" }, rule.name),
    element("td", {}, inputs),
    element("td", {}, rule.output),
    element("td", { class: "number", text: rule.firings }),
    element("td", { class: "number", text: rule.outputs }),
    element("td", { class: "number", text: rule.last_latency_ms === null ? "–" : `${rule.last_latency_ms} ms` }),
    element("td", { class: "number", text: rule.failures }),
    element("td", {}, error));
}

async function registerRule(event) {
  event.preventDefault();
  const form = event.target;
  const name = form.elements.name.value.trim();
  const output = encodeURIComponent(form.elements.output.value.trim());
  try {
    const response = await send("PUT", `/rules/${encodeURIComponent(name)}?output=${output}`, form.elements.text.value,
      "application/sparql-query");
    say("#rules-message", response.status === 201 ? `Rule ${name} registered.` : `Rule ${name} replaced.`);
  } catch (error) {
    say("#rules-message", `Rule ${name} was not registered: ${describeError(error)}`, true);
  }
  await refreshRules();
}

// -- queries: RSP-QL and C-SPARQL registrations (docs/rsp-ql.md) ----------------------------------------------

const LANGUAGES = { "rsp-ql": "RSP-QL", "c-sparql": "C-SPARQL" };

async function refreshQueries() {
  let queries;
  try {
    queries = await getJson("/queries");
  } catch {
    return;
  }
  // the rows hold buttons: redrawn only when a description changed, so the focus stays where the user left it
  const described = JSON.stringify(queries);
  if (described === state.queriesShown) return;
  state.queriesShown = described;
  $("#queries-table tbody").replaceChildren(...queries.map(queryRow));
  $("#queries-empty").hidden = queries.length > 0;
}

function queryRow(query) {
  const windows = element("ul", { class: "plain" }, query.windows.map((w) =>
    element("li", {}, `${w.stream} `, element("code", { text: w.windows }))));
  const results = query.rule
    ? `the rule ${query.rule}, writing into stream ${query.output}`
    : element("button", { type: "button", "data-follow": query.name, "aria-label": `Follow results of ${query.name}`,
      text: "Follow results" });
  return element("tr", { "data-query": query.name },
    element("th", { scope: "row" }, element("a", { href: `/queries/${encodeURIComponent(query.name)}`,
      text: query.name })),
    element("td", { text: `${LANGUAGES[query.language] || query.language} ${query.form}` }),
    element("td", {}, windows),
    element("td", {}, element("code", { text: query.report }), ` · ${query.operator}`),
    element("td", {}, results),
    element("td", {}, element("button", { type: "button", class: "writes", "data-delete": query.name,
      disabled: !canWrite(), "aria-label": `Delete query ${query.name}`, text: "Delete" })));
}

async function registerQuery(event) {
  event.preventDefault();
  const form = event.target;
  const name = form.elements.name.value.trim();
  const params = new URLSearchParams();
  for (const key of ["report", "operator", "t0"]) {
    const value = form.elements[key].value.trim();
    if (value) params.set(key, value);
  }
  const options = params.toString() ? `?${params}` : "";
  try {
    const response = await send("PUT", `/queries/${encodeURIComponent(name)}${options}`, form.elements.text.value,
      "application/sparql-query");
    say("#queries-message", response.status === 201 ? `Query ${name} registered.` : `Query ${name} replaced.`);
  } catch (error) {
    say("#queries-message", `Query ${name} was not registered: ${describeError(error)}`, true);
  }
  await refreshQueries();
}

// The table's buttons, delegated: its rows are redrawn when the registrations change.
async function queryAction(event) {
  const button = event.target.closest("button");
  if (!button) return;
  if (button.dataset.follow) followQuery(button.dataset.follow);
  else if (button.dataset.delete) await deleteQuery(button.dataset.delete);
}

// A registered query's results, as the live outputs' panels follow a windowed IRI: the same WebSocket, one
// message per window of its first window's sequence (the registration fixes the sequence: no sequence= to resume).
function followQuery(name) {
  const panel = openPanel($("#registration-subscriptions"), ["Results of ", element("code", { text: name })],
    `/queries/${encodeURIComponent(name)}/results`, {
      namesSequence: false,
      refused: "check that the query is still registered and is not a rule (a rule's results are its output stream)",
      focusAfterStop: "#queries-heading",
    });
  panel.dataset.query = name;
  say("#queries-message", `Following the results of ${name}: each window's result appears below as it completes.`);
}

async function deleteQuery(name) {
  try {
    await send("DELETE", `/queries/${encodeURIComponent(name)}`);
  } catch (error) {
    say("#queries-message", `Query ${name} was not deleted: ${describeError(error)}`, true);
    return;
  }
  say("#queries-message", `Query ${name} deleted.`);
  for (const panel of document.querySelectorAll("article.subscription[data-query]")) {
    if (panel.dataset.query !== name) continue;
    panel.stopped = true; // no reconnecting to a query that is gone
    if (panel.socket) panel.socket.close();
    panel.querySelector("p.message").textContent = "The query was deleted: no more windows.";
  }
  await refreshQueries();
  $("#queries-heading").focus(); // its button is gone with its row
}

// -- live outputs: one WebSocket per subscription ---------------------------------------------------------------

function subscribe(event) {
  event.preventDefault();
  const form = event.target;
  const name = form.elements.stream.value;
  const windows = form.elements.windows.value.trim();
  const query = form.elements.query.value.trim();
  const params = new URLSearchParams({ WINDOWS: windows });
  if (query) params.set("query", query);
  else params.set("format", "application/n-quads"); // the window dataset, a line per quad
  openPanel($("#subscriptions"), [`${name} `, element("code", { text: windows }), query ? " with a query" : ""],
    `/streams/${encodeURIComponent(name)}?${params}`, {
      namesSequence: true, // a HEAD ref names another sequence at each registration: a resume names its own
      refused: "check the stream and the WindowRef (it must be repeating, R/…)",
      focusAfterStop: "#live-heading",
    });
}

// A panel following a continuous response over a WebSocket (a windowed IRI, or a registered query's results), the
// newest window first, with a button to stop. options: namesSequence (a resume sends sequence=), refused (what to
// check when the server refuses it), focusAfterStop (where the focus goes when the panel is removed).
function openPanel(container, heading, url, options) {
  const id = `subscription-${++state.subscriptions}`;
  const list = element("ol", { class: "windows", "aria-live": "polite", "aria-relevant": "additions",
    "aria-labelledby": `${id}-heading` });
  const status = element("p", { class: "message", text: "Connecting…" });
  const stop = element("button", { type: "button", text: "Stop following" });
  const panel = element("article", { class: "card subscription", id, "aria-labelledby": `${id}-heading` },
    element("h2", { id: `${id}-heading` }, heading), stop, status, list);
  panel.options = options;
  container.prepend(panel);
  follow(url, status, list);
  stop.addEventListener("click", () => {
    panel.stopped = true;
    if (panel.socket) panel.socket.close();
    panel.remove();
    $(options.focusAfterStop).focus();
  });
  return panel;
}

// One message per window over a WebSocket at the windowed IRI (docs/connectors.md, "WebSocket"): the first message
// carries the response's headers (Window-Sequence), each next one a window's headers (its index and bounds) and its
// document. A dropped connection reconnects and resumes after the last window received (after=, and sequence= where
// the panel names one). A browser's WebSocket cannot send Authorization: the token given goes as access_token=
// (RFC 6750 §2.3), which the server takes from WebSocket handshakes only and logs nowhere (docs/access.md).
function follow(url, status, list, resume = null) {
  const panel = list.closest("article");
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const extra = new URLSearchParams();
  if (resume) {
    extra.set("after", resume.after);
    if (resume.sequence) extra.set("sequence", resume.sequence);
  }
  if (token()) extra.set("access_token", token());
  const more = `${extra}` ? `${url.includes("?") ? "&" : "?"}${extra}` : "";
  const socket = new WebSocket(`${scheme}//${location.host}${url}${more}`);
  const seen = { sequence: resume?.sequence ?? null, after: resume?.after ?? null, opened: false };
  panel.socket = socket;
  socket.addEventListener("message", (message) => {
    const data = JSON.parse(message.data);
    if (!seen.opened) {
      seen.opened = true;
      if (panel.options.namesSequence) seen.sequence = data["Window-Sequence"] ?? seen.sequence;
      status.textContent = "Waiting for the next window (windows complete as stream time passes their end).";
      return;
    }
    if (data.notice) {
      status.textContent = `The server ended the response: ${data.notice}`;
      panel.stopped = true;
      return;
    }
    const index = data["Window-Index"];
    seen.after = index;
    status.textContent = `Latest: window ${index}, received ${new Date().toLocaleTimeString()}.`;
    const span = liveBounds(data["Window-Start"], data["Window-End"]);
    list.prepend(element("li", { "data-window": index },
      element("h3", {}, `Window ${index} `, element("span", { class: "bounds", text: span })),
      renderDocument(data.body)));
    while (list.children.length > LIVE_KEPT) list.lastElementChild.remove();
  });
  socket.addEventListener("close", () => {
    if (panel.stopped || !panel.isConnected) return;
    if (!seen.opened) {
      status.textContent = `The server refused the subscription: ${panel.options.refused}.`;
      checkSubscription(url, status);
      return;
    }
    status.textContent = "Connection lost: reconnecting, resuming after the last window received…";
    const next = seen.after === null ? null : { after: seen.after, sequence: seen.sequence };
    setTimeout(() => follow(url, status, list, next), 1000);
  });
}

// Window-Start and Window-End as the panel shows them: a time window [start, end), a count window its elements.
function liveBounds(start, end) {
  if (start === undefined) return "";
  if (start.startsWith("element ")) {
    const first = start.slice(8);
    const last = end.slice(8);
    return first === last ? `element ${first}` : `elements ${first}–${last}`;
  }
  return `[${start}, ${end})`;
}

// A refused WebSocket handshake has no readable body: ask once more over HTTP to show the server's words.
async function checkSubscription(url, status) {
  try {
    const response = await fetch(url, { headers: writeHeaders({ Accept: "text/event-stream" }) });
    if (!response.ok) status.textContent = `The server refused the subscription: ${response.status}: ${(await response.text()).trim()}`;
    else response.body.cancel();
  } catch {
    // the status already says the subscription failed
  }
}

// A window's document: SPARQL JSON results as a table, anything else (N-Quads, N-Triples, CSV …) as text.
function renderDocument(text) {
  try {
    const parsed = JSON.parse(text);
    if (parsed && parsed.head) return resultsTable(parsed);
  } catch {
    // not JSON: shown as text
  }
  return element("pre", { class: "document", text: text || "(empty)" });
}

function resultsTable(results, caption) {
  if ("boolean" in results) return element("p", { class: "boolean", text: `ASK: ${results.boolean}` });
  const vars = results.head.vars || [];
  const rows = results.results.bindings;
  return element("table", { class: "data results" },
    element("caption", { text: caption || `${rows.length} solution(s)` }),
    element("thead", {}, element("tr", {}, vars.map((v) => element("th", { scope: "col", text: `?${v}` })))),
    element("tbody", {}, rows.map((row) => element("tr", {}, vars.map((v) => element("td", {}, term(row[v])))))));
}

function term(binding) {
  if (!binding) return "";
  if (binding.type === "uri") return element("code", { text: `<${binding.value}>` });
  if (binding.type === "bnode") return element("code", { text: `_:${binding.value}` });
  if (binding.type === "triple") return element("code", { text: "<< … >>" });
  const suffix = binding["xml:lang"] ? `@${binding["xml:lang"]}`
    : (binding.datatype && !binding.datatype.endsWith("#string") ? `^^<${binding.datatype}>` : "");
  return element("span", {}, binding.value, suffix ? element("small", { text: ` ${suffix}` }) : "");
}

// -- query ----------------------------------------------------------------------------------------------------

async function runQuery(event) {
  event.preventDefault();
  const form = $("#query-form");
  const text = form.elements.query.value;
  const revision = form.elements.revision.value.trim();
  const target = form.elements.target.value || "/sparql";
  const url = revision ? `${target}?revision-id=${encodeURIComponent(revision)}` : target;
  clearQueryError();
  say("#query-status", "Running…");
  $("#query-results").replaceChildren();
  const started = performance.now();
  try {
    const response = await fetch(url, { method: "POST", body: text, headers: {
      "Content-Type": "application/sparql-query",
      Accept: "application/sparql-results+json, application/n-quads;q=0.9, application/n-triples;q=0.8",
    } });
    const body = await response.text();
    if (!response.ok) throw new HttpError(response.status, body, response.headers);
    const seconds = ((performance.now() - started) / 1000).toFixed(2);
    const type = response.headers.get("Content-Type") || "";
    if (type.includes("json")) {
      const results = JSON.parse(body);
      const count = "boolean" in results ? "an answer" : `${results.results.bindings.length} solution(s)`;
      $("#query-results").replaceChildren(resultsTable(results, `Results: ${count}`));
      say("#query-status", `Done in ${seconds} s: ${count}.`);
    } else {
      $("#query-results").replaceChildren(element("pre", { class: "document", text: body || "(empty)" }));
      say("#query-status", `Done in ${seconds} s: ${type.split(";")[0]}.`);
    }
  } catch (error) {
    say("#query-status", "");
    showQueryError(error, text);
  }
}

// An error next to the query: its message, and where the server says it is ("line L column C"), the line with a
// caret under the column; the caret of the text area moves there.
function showQueryError(error, text) {
  const box = $("#query-error");
  const message = error instanceof HttpError ? error.message : `The request failed: ${error.message}`;
  const position = /line (\d+),? column (\d+)/i.exec(message);
  const parts = [];
  if (position) {
    const line = Number(position[1]);
    const column = Number(position[2]);
    parts.push(element("p", { class: "where" }, element("strong", { text: `Line ${line}, column ${column}` })));
    const source = text.split("\n")[line - 1];
    if (source !== undefined) {
      const gutter = `${line} | `;
      parts.push(element("pre", { class: "excerpt", "aria-hidden": "true" },
        `${gutter}${source}\n${" ".repeat(gutter.length + Math.max(0, column - 1))}^`));
    }
    const lines = text.split("\n");
    const offset = lines.slice(0, line - 1).reduce((sum, l) => sum + l.length + 1, 0) + column - 1;
    const area = $("#query-text");
    area.setSelectionRange(offset, offset);
  }
  parts.push(element("p", { class: "message-text", text: message }));
  box.replaceChildren(...parts);
  box.hidden = false;
  const area = $("#query-text");
  area.setAttribute("aria-invalid", "true");
  area.setAttribute("aria-describedby", "query-error query-keys");
}

function clearQueryError() {
  const box = $("#query-error");
  box.hidden = true;
  box.replaceChildren();
  const area = $("#query-text");
  area.removeAttribute("aria-invalid");
  area.setAttribute("aria-describedby", "query-keys");
}

// -- start ----------------------------------------------------------------------------------------------------

function start() {
  $("#token").value = token();
  $("#token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("#token").value.trim();
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
    showAccess();
  });
  $("#forget-token").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    $("#token").value = "";
    showAccess();
    $("#token").focus();
  });
  $("#create-stream").addEventListener("submit", createStream);
  $("#upload").addEventListener("submit", upload);
  $("#punctuate").addEventListener("submit", punctuate);
  $("#register-rule").addEventListener("submit", registerRule);
  $("#register-query").addEventListener("submit", registerQuery);
  $("#queries-table tbody").addEventListener("click", queryAction);
  $("#subscribe").addEventListener("submit", subscribe);
  $("#query-form").addEventListener("submit", runQuery);
  $("#query-text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) runQuery(event);
  });
  window.addEventListener("hashchange", () => showView(location.hash.slice(1), true));
  readAccess();
  showView(location.hash.slice(1) || "streams", false);
}

start();
