"""batchgate's gate: observers, the gates.yaml language, the evaluator and the outputs.

`import gate` must not import torch, locust, `reference_server` or `loadgen` (DESIGN.md §3).
"""

__all__: list[str] = []
