"""``cpplan gpu-check``: one command that proves and measures cpplan on a GPU (layer: above
:mod:`cpplan.calibration` and :mod:`cpplan.hf`, below the CLI).

It prints the environment, proves the kernels path exact on tiny random models (:mod:`.exactness`),
measures the cards' predictions on a truncated Qwen3.6-35B-A3B (:mod:`.measured_waves`) and the GDN and
tree-attention kernels alone (:mod:`.kernel_sweeps`), and writes one JSON, a markdown table, a
calibration CSV and planner-state logs (:mod:`.report_files`). ``--dry-run`` runs the same steps on the
CPU at tiny shapes.
"""
