"""Benchmark suites, synthetic workloads, the peers compared (:mod:`cpplan.bench.peers`,
:mod:`cpplan.bench.megatron_dynamic`) and the side-by-side runner of ``cpplan bench``."""
