"""From a problem to priced waves: the prefix tree, packed layouts, chunk ownership and its local quantities,
the numpy evaluator, and plan results with their JSON form."""
