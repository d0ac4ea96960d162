"""From a plan to tensors: the lower layer of execution. Per-rank materialization, tree attention masks,
the one communication primitive the executors use (:mod:`cpplan.runtime.comm`), the reference model and
torch.distributed helpers; the executors (:mod:`cpplan.hf`) are above it."""
