"""HTTP (Flask): the SPARQL 1.1 Protocol (``sparql``), the Graph Store Protocol (``gsp``), streams, their windowed
IRIs and continuous responses (``streams``, ``continuous``, ``resume``), rules (``rules``), ``/status``; access
control, content negotiation, and the one place errors become responses (``errors``)."""

from protocol.app import create_app
from protocol.services import ServerConfig, Services

__all__ = ["ServerConfig", "Services", "create_app"]
