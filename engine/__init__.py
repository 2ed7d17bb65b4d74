"""Extended-SPARQL evaluation over the store (docs/extended-sparql.md): ``REVISION``, ``WINDOWS``, ``SERVICE``
(in-process for this server's IRIs, over HTTP for others: ``remote``), ``THEN()`` and quad templates (``evaluation``,
under an evaluation's ``context``; which dataset a part reads: ``datasets``); which elements a windowed IRI selects
(``selection``); plain queries (``plain``); the static-data cache (``cache``). The one
place where pyoxigraph's query errors become ours (``plain``, ``evaluation``; ``errors``)."""
