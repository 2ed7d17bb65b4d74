"""Derive the expected windows and answers of CSRBench queries 1-3 under our window semantics.

Independent of the system under test: this script imports nothing from this repository and
evaluates the queries with rdflib's SPARQL engine (the concentrator uses pyoxigraph).

Semantics (see docs/csrbench.md):

- one stream element per file ``data/data_NN.ttl``, timestamp = NN seconds after t0 = 0
  (1970-01-01T00:00:NNZ);
- time-based forward windows ``[k*slide, k*slide + size)`` (seconds), k >= 0, every window up to
  and including the one that contains the last element (NN = 33);
- the query's WHERE is evaluated over the merge (RDF set union) of the window's element graphs,
  used as the default graph ("union" evaluation).  Because our system keeps each element as a
  named graph, the script also evaluates the pattern wrapped as ``GRAPH ?g { ... }`` over a
  dataset with one named graph per element ("per-element" evaluation, bag semantics, ``?g`` not
  projected) and records every window where the two differ.

Output: ``conformance/csrbench_expected.json`` (``--out`` to change).  The answers of each window
are the union-evaluation solutions (a multiset: SELECT without DISTINCT), each solution a
``{var: N-Triples term}`` object, sorted.  Windows whose per-element answers differ also carry
``answers_per_element_graph``.

Usage: ``.venv/bin/python -m conformance.csrbench_expected [--csrbench DIR] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

import rdflib
from rdflib import BNode, Dataset, Graph, URIRef

# Keep literals' lexical forms as written ("43"^^xsd:double, not rdflib's canonical "43.0"):
# the system under test (pyoxigraph) returns terms as stored.
rdflib.NORMALIZE_LITERALS = False

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSRBENCH = REPO_ROOT / "conformance" / "suites" / "csrbench"
DEFAULT_OUT = REPO_ROOT / "conformance" / "csrbench_expected.json"
QUERIES = ("1", "2", "3")
ELEMENT_IRI = "urn:csrbench:element:{:02d}"  # only used as graph names in this script


def read_properties(path: Path) -> dict[str, str]:
    """Java .properties reader: backslash-newline continuations, '=' or ':' separators."""
    props: dict[str, str] = {}
    logical = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line.startswith(("#", "!"))):
            continue
        # a line continues when it ends with an odd number of backslashes (the blanks some lines of
        # srbench-queries.properties have after the backslash are tolerated); a space is put in
        # place of the line break so that "?res .\\" + "?res ..." stays readable
        stripped = line.rstrip()
        m = re.search(r"(\\+)$", stripped)
        if m and len(m.group(1)) % 2 == 1:
            logical += stripped[:-1] + " "
            continue
        logical += line
        key, value = (re.split(r"\s*[=:]\s*", logical, maxsplit=1) + [""])[:2]
        props[key.strip()] = value.strip()
        logical = ""
    return props


def normalize_query(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def load_elements(data_dir: Path) -> dict[int, Graph]:
    elements: dict[int, Graph] = {}
    for f in sorted(data_dir.glob("data_*.ttl")):
        n = int(re.fullmatch(r"data_(\d+)\.ttl", f.name).group(1))
        g = Graph()
        g.parse(f, format="turtle")
        elements[n] = g
    return elements


def windows(size: int, slide: int, last_t: int) -> list[tuple[int, int, int]]:
    """Forward windows [k*slide, k*slide+size), k >= 0, up to the one containing last_t.

    With several windows containing last_t (size > slide), up to the last of them."""
    out = []
    k = 0
    while k * slide <= last_t:
        out.append((k, k * slide, k * slide + size))
        k += 1
    return out


def split_select(query: str) -> tuple[str, str, str]:
    """(prologue + SELECT clause, WHERE body without braces, rest)."""
    m = re.search(r"\bWHERE\s*\{", query, re.IGNORECASE)
    assert m, query
    head = query[: m.start()]
    depth, i = 1, m.end()
    while depth:
        c = query[i]
        depth += {"{": 1, "}": -1}.get(c, 0)
        i += 1
    return head, query[m.end(): i - 1], query[i:]


def term_nt(t) -> str:
    return t.n3() if not isinstance(t, BNode) else f"_:{t}"


def solutions(result, variables: list[str]) -> list[dict[str, str]]:
    rows = []
    for row in result:
        rows.append({v: term_nt(row[v]) for v in variables if row[v] is not None})
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csrbench", type=Path, default=DEFAULT_CSRBENCH)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()

    props = read_properties(args.csrbench / "resources" / "srbench-queries.properties")
    elements = load_elements(args.csrbench / "data")
    bnodes = sum(isinstance(x, BNode) for g in elements.values() for t in g for x in t)
    last_t = max(elements)

    out = {
        "t0": 0,
        "source": "derived by conformance/csrbench_expected.py with rdflib "
        "(union of the window's element graphs as default graph)",
        "blank_nodes_in_data": bnodes,
        "queries": {},
    }
    for q in QUERIES:
        pre = f"srb.query{q}."
        query = normalize_query(props[pre + "booleanquery"])
        size_ms, slide_ms = int(props[pre + "window.size"]), int(props[pre + "window.slide"])
        assert int(props[pre + "window.firstt0"]) == 0
        assert size_ms % 1000 == 0 and slide_ms % 1000 == 0
        size, slide = size_ms // 1000, slide_ms // 1000
        head, body, rest = split_select(query)
        per_element_query = f"{head}WHERE {{ GRAPH ?g {{ {body} }} }}{rest}"
        variables = re.findall(r"\?(\w+)", head)
        wins = []
        for k, start, end in windows(size, slide, last_t):
            members = [n for n in sorted(elements) if start <= n < end]
            union = Graph()
            ds = Dataset()
            for n in members:
                union += elements[n]  # RDF merge of ground graphs = set union of triples
                gctx = ds.graph(URIRef(ELEMENT_IRI.format(n)))
                gctx += elements[n]
            ans = solutions(union.query(query), variables)
            per_el = solutions(ds.query(per_element_query), variables)
            # cross-check the GRAPH ?g evaluation: same bag as evaluating each element alone
            per_el_direct = sorted(
                (s for n in members for s in solutions(elements[n].query(query), variables)),
                key=lambda r: json.dumps(r, sort_keys=True),
            )
            assert per_el == per_el_direct, (q, k)
            w = {
                "index": k,
                "start_s": start,
                "end_s": end,
                "elements": members,
                "answers": ans,
            }
            dup = sum(c - 1 for c in Counter(json.dumps(s, sort_keys=True) for s in ans).values())
            if dup:
                w["duplicate_answers"] = dup
            if per_el != ans:
                w["answers_per_element_graph"] = per_el
            wins.append(w)
        out["queries"][q] = {
            "size_s": size,
            "slide_s": slide,
            "window_ref": f"R/1970-01-01T00:00:00Z/PT{size}S"
            + ("" if size == slide else f"/PT{slide}S"),
            "query": query,
            "per_element_query": per_element_query,
            "union_equals_per_element_graph": all(
                "answers_per_element_graph" not in w for w in wins
            ),
            "windows": wins,
        }
    args.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for q, d in out["queries"].items():
        counts = [len(w["answers"]) for w in d["windows"]]
        pe = [len(w.get("answers_per_element_graph", w["answers"])) for w in d["windows"]]
        print(f"query {q}: {len(counts)} windows, answers per window {counts}, total {sum(counts)}")
        if pe != counts:
            print(f"  per-element GRAPH ?g evaluation: {pe}, total {sum(pe)}")
    print(f"blank nodes in data: {bnodes}; wrote {args.out}")


if __name__ == "__main__":
    main()
