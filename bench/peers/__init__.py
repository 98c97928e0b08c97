"""The peers benchmarks (bench/README.md)."""
