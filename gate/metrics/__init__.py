"""Stage 2 of the gate: RunData becomes measurements (the glossary's metrics, DESIGN-level
definitions in docs/gates.md).

`derive.measure` dispatches one metric for one profile and scope to `client` (request records),
`server` (steps, scrapes), `sampler` (gpu.jsonl) or `batch_job` (load.json's offline job
summary); `window` excludes the warm-up and selects stages; `measurements` holds the value
types. Nothing here knows thresholds or verdicts.
"""
