"""Conformance and test tooling run against the live server: the W3C SPARQL 1.1 Protocol, Graph Store Protocol,
service and construct manifests (``w3c``, ``w3c_query``; material in ``suites/``), CSRBench and its oracle
(``csrbench``, ``csrbench_expected``), real SPARQL engines as clients (``clients``), and starting the server or a
Spark standalone cluster for tests and benchmarks (``server``, ``spark_cluster``)."""
