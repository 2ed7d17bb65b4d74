"""The Spark pipeline (docs/streams.md, "The Spark pipeline"), and nothing else: the session (``spark``), the
streaming source over the streams' element logs (``element_source``), window assignment as one Spark plan
(``assignment``), and the streaming query whose batch handler summarizes each batch for the pure window core
(``batches``; the semantics are ``sparql_ext.window_state``), with its account for ``/status`` (``status``). The
element logs are read through the store (``store.log_reading``)."""
