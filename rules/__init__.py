"""Rules (docs/rules.md): CONSTRUCT queries over windowed IRIs that fire on every completed window and emit new stream
elements. The registry and input analysis (``registry``; the rule graph, no cycles: ``graph``), firing on the
pipeline's windows (``firing``), firings evaluated in Spark executors (``tasks``; the pipeline runs their jobs), and
rule errors (``errors``)."""
