"""Benchmarks: `make bench-store` runs bench.store_bench."""
