"""The live tier: the rendered serve config against a real Ray head and a Prometheus on loopback
(`pytest tests/live -n 0`)."""
