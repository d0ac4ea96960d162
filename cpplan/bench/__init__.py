"""Benchmark suites, synthetic workloads and the side-by-side runner of ``cpplan bench``."""
