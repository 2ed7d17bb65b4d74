"""Transports that carry elements in and window results out other than an HTTP upload
(docs/connectors.md). MQTT: the client loops (``mqtt_in``: a stream fed from topics, exactly-once by element graph
name, dead letters, reconnects; ``mqtt_out``: window results and elements published to topics), the message formats
(``messages``), the broker's address (``broker``) and their composition (``hub``). LDES: ``ldes``, a stream that
follows a Linked Data Event Stream (``ldes-source=`` in its configuration; ``ldes_pages`` reads one page), reaching
other hosts only where ``--service-allow`` lets them (``engine.remote.host_allowed``). Only
``concentrator.compose`` imports this package (it starts them); they write to streams (``store``) as an upload
does, and the HTTP layer reaches them through ``protocol.services``."""
