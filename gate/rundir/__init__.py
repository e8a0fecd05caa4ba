"""Stage 1 of the gate: a run directory becomes columns (docs/records.md).

`requests` parses requests.jsonl, `columns` reads the load generator's columnar mirror of it,
`gaps` turns chunk times into per-token gaps (the one definition both readers use), `abort`
reads and writes abort.json, `run` puts a run together (`load_run` -> RunData / ProfileData,
steps, scrapes, sampler records). Formats only: no metric formulas, no gates.
"""
