"""Test helpers: proxy.py (the proxy launcher), redis_server.py (the test Redis and its namespaces),
stub_upstream.py (the stand-in LLM provider), detectors.py (fake detectors), faults.py (kill -9,
metrics), ledger.py (store fixtures)."""
