"""Extended-SPARQL evaluation over the store (DESIGN §2): ``REVISION``, ``WINDOWS``, ``SERVICE`` (in-process for
this server's IRIs, over HTTP for others), ``THEN()`` and quad templates (``evaluation``); which elements a windowed
IRI selects (``selection``); plain queries (``plain``); the static-data cache (``cache``). The one place where
pyoxigraph's query errors become ours (``plain``, ``evaluation``; ``errors``)."""
