"""`batchgate tune` (docs/tune.md): the batching settings that maximise a workload's objective
while every gate passes with confidence.

`space` holds the knobs and their grids, `candidate` one set of knob values and what its runs
measured, `objective` what is maximised and the monitor gates it is read from, `runner` one
candidate measured at one rung (live, on a server of its own, or by a command), `search` the
order of the search and the winner, `session` the target, the one calibration and the search,
`preset` the winner as a named preset and the files it goes into. Each candidate is a
`batchgate run` (`gate.orchestrator.runner`); tune.json and tune.html are `gate.outputs`'.
"""
