"""The request record's format, shared by the two products that meet through it (docs/records.md).

The load generator (`loadgen`) writes `requests.jsonl` and, at a clean close, `requests.parquet`;
the gate (`gate`) reads either. Both import the format from here, so it is written down once:

- `schema`: the record's fields (required, nullable, optional with the value an older record
  meant), requests.parquet's Arrow schema, writer options and metadata keys, and the stamp that
  ties a Parquet file to the JSONL bytes it was made from;
- `scan`: DuckDB's whole-file read of a requests.jsonl into tables of that schema, and the
  checks that let its rows stand for the lines (one row a line, the file unchanged).

It sits below both products and imports neither (tests/gate/test_import_boundaries.py,
tests/loadgen/test_loadgen_import_boundaries.py), nor locust, gevent or torch; pyarrow, numpy
and DuckDB are imported where they are used, not at import. It writes no files: the writers
(`loadgen.parquet`, `gate.rundir.request_parquet`) and the readers' proofs
(`gate.rundir.jsonl_scan`, `gate.rundir.jsonl_records`) stay with their products.
"""
