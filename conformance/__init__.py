"""Conformance runners: the W3C SPARQL 1.1 Protocol and Graph Store Protocol manifests."""
