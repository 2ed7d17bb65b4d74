"""Connectors: streams fed from elsewhere than an HTTP upload. ``ldes``: a stream that follows a Linked Data Event
Stream (``ldes-source=`` in its configuration; ``ldes_pages`` reads one page). The composition root
(``concentrator.compose``) starts them; nothing else imports this package. They write to streams (``store``) as an
upload does, and reach other hosts only where ``--service-allow`` lets them (``engine.evaluation.host_allowed``)."""
