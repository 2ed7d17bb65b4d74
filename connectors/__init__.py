"""Transports that carry elements in and window results out other than HTTP (issue 16; docs/connectors.md): the
MQTT client loops (``mqtt_in``: a stream fed from topics, exactly-once by element graph name, dead letters,
reconnects; ``mqtt_out``: window results and elements published to topics), the message formats (``messages``),
the broker's address (``broker``) and their composition (``hub``). Only ``concentrator.compose`` imports this
package; the HTTP layer reaches it through ``protocol.services.Connectors``."""
