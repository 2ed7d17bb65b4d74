"""Delivering window results to subscribers, apart from any one transport: following a window sequence
(``feeds``), the subscriptions running now (``subscriptions``) and the event loop that writes one feed's results to
every subscriber of it without a thread per subscriber (``fanout``). HTTP (``protocol``) validates a request and
hands its connection over; other transports read the same feeds."""
