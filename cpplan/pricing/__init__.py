"""A problem and its exact prices: the prefix tree, packed layouts, chunk ownership and its local
quantities, the numpy evaluator with the GDN hand-off, the problem with its per-problem memo, and one
priced wave. Plans made of these waves, and their JSON, are in :mod:`cpplan.plans`."""
