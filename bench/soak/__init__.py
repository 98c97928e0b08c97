"""The soak benchmarks (bench/README.md)."""
