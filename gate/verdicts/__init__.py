"""Stage 3 of the gate: a measurement and a gate become a verdict; no I/O.

`assess` judges one statistic against a threshold with its bounds, `judge` one gate over its
scopes (ratios between scopes, baselines), `evaluate` a whole gates file (and the incremental
form used by abort_on_fail) and the exit code; `model` holds Status, Verdict, Evaluation.
"""
