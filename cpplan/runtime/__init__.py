"""From a plan to tensors and a forward pass: per-rank materialization, tree attention masks, the reference
model and torch.distributed helpers."""
