"""What the user states: model cards and their formula language, the local-quantity registry, solver profiles,
topology, sizes and workloads (validated, immutable)."""
