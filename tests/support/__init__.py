"""Shared test helpers (not collected): prefix-tree workloads, the bad-input catalogue, pack datasets,
a registry extension script."""
