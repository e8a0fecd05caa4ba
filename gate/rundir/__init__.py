"""Stage 1 of the gate: a run directory becomes columns (docs/records.md).

`record_schema` names the request record's fields and requests.parquet's schema and stamp,
`jsonl_records` parses requests.jsonl into Arrow tables, `request_parquet` decides whether a
requests.parquet may stand for the JSONL and writes one, `requests` turns either into numpy columns
(`read_requests`), `gaps` turns chunk times into per-token gaps, `abort` reads and writes
abort.json, `run` puts a run together (`load_run` -> RunData / ProfileData, steps, scrapes,
sampler records). Formats only: no metric formulas, no gates.
"""
