"""kdist benchmarks: `python -m bench.run` (see bench/README.md)."""
