"""Rules (DESIGN §1): CONSTRUCT queries over windowed IRIs that fire on every completed window and emit new stream
elements. The registry and input analysis (``registry``), firing on the pipeline's windows (``firing``), firings
evaluated in Spark executors (``tasks``; the pipeline runs their jobs), and rule errors (``errors``)."""
