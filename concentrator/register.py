"""``concentrator register FILE URL``: register an RSP-QL or C-SPARQL query file on a server (docs/rsp-ql.md).

``URL`` is the server (``http://HOST:PORT``: the query is named after the file's stem) or the query's own URL
(``…/queries/NAME``). Prints where its results are (or the rule it became); exit 1 when the server refuses it (its
answer is shown) or cannot be reached, 2 for a file that cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import requests


def query_url(file: Path, url: str) -> str:
    """The query's URL: ``url`` itself when it names one, else ``url/queries/<file stem>``.

    >>> query_url(Path("q1.rspql"), "http://127.0.0.1:8080/")
    'http://127.0.0.1:8080/queries/q1'
    >>> query_url(Path("q1.rspql"), "http://127.0.0.1:8080/queries/hot")
    'http://127.0.0.1:8080/queries/hot'
    """
    url = url.rstrip("/")
    return url if "/queries/" in url else f"{url}/queries/{file.stem}"


def run_register(args: argparse.Namespace) -> int:
    try:
        text = args.file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        print(f"concentrator register: {args.file}: {error}", file=sys.stderr)
        return 2
    params = {key: value for key, value in (("report", args.report), ("operator", args.operator), ("t0", args.t0))
              if value}
    headers = {"Content-Type": "application/sparql-query"}
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    url = query_url(args.file, args.url)
    try:
        answer = requests.put(url, data=text.encode(), params=params, headers=headers, timeout=60)
    except requests.RequestException as error:
        print(f"concentrator register: {url}: {error}", file=sys.stderr)
        return 1
    if answer.status_code not in (201, 204):
        print(f"concentrator register: {answer.status_code}: {answer.text.strip()}", file=sys.stderr)
        return 1
    described = requests.get(url, timeout=60).json()
    what = "registered" if answer.status_code == 201 else "replaced"
    if described.get("rule"):
        print(f"{what} {url}: rule {described['rule']}, outputs to stream {described['output']}")
    else:
        print(f"{what} {url}: results at {described['results']}")
    return 0
