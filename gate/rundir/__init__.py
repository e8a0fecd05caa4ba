"""Stage 1 of the gate: a run directory becomes columns (docs/records.md).

The request record's fields and requests.parquet's schema and stamp are
`batchgate_records.schema` (shared with the load generator, which writes them);
`jsonl_records` parses requests.jsonl into Arrow tables, `jsonl_scan` proves DuckDB's read of it
(`batchgate_records.scan`) where it can stand for that, `request_parquet` decides whether a
requests.parquet may stand for the JSONL, reads it a slice at a time and writes one, `requests`
turns either into numpy columns (`read_requests`), `gaps` turns chunk times into per-token gaps,
`arrow_views` and `ahead` are the readers' numpy views of Arrow buffers and their read-ahead
thread, `step_records` reads steps.jsonl (or its steps.parquet copy) into columns,
`sample_records` gpu.jsonl (or its gpu.parquet copy), `parquet_copy` reads and writes those
stamped copies, `observer_records` the other observer files into records, `abort` reads and
writes abort.json,
`run` puts a run together (`load_run` -> RunData / ProfileData). Formats only: no metric
formulas, no gates.
"""
