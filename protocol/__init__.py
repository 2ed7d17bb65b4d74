"""HTTP: the SPARQL 1.1 Protocol and Graph Store Protocol over a revisioned dataset (Flask)."""

from protocol.app import ServerConfig, create_app

__all__ = ["ServerConfig", "create_app"]
