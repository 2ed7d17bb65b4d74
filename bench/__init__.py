"""Plain-Python benchmarks comparing the concentrator server with bare pyoxigraph baselines."""
