"""batchgate's benchmarks: scripts that measure a target side by side in one run, print a table
and write JSON under benchmarks/results/ (speed targets live here, never in timed tests).

Run each from the repository root as a module, e.g. `.venv/bin/python -m benchmarks.bench_server
--help`: the scripts import their helpers as `benchmarks.<module>`, so `python benchmarks/x.py`
does not find them. Three helpers are started as files by path, by other interpreters or as
children, and import nothing from this package: server_probe.py, body_proxy.py and
openai_sdk_client.py. The GPU check runs the same way (`python -m benchmarks.gpu_check`) and
starts each of its sections as `python -m benchmarks.gpu_sections`.

`benchmarks.harness` is the one place that starts a server (the bundled one or a given command),
waits for its /health, stops it and keeps its log; `benchmarks.host_steal` reads the time the
hypervisor took. Nothing here is imported by the product packages (reference_server, loadgen,
gate), and this package is not installed with them.
"""
