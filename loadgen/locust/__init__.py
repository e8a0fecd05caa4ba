"""The Locust side of loadgen: everything that runs inside the load process.

Modules: `options` (Locust command-line options and the run config they describe), `collector`
(master/local side: requests.jsonl and load.json), `sink` (worker side: records to the master),
`user` (the driver user and its Locust request events), `install` (wiring into a Locust
environment, and the split of the schedule over the users: one slot each), `runner` (the loadgen
CLI's programmatic Locust run).

This package's `__init__` imports nothing; its modules import locust, which monkey-patches the
standard library with gevent, so only the load process may import them (`loadgen.cli` lazily,
`loadgen.worker`, `loadgen/locustfile.py`). Inside this package `import locust` is absolute and
still means the Locust library, not this package; only a `sys.path` entry that is `loadgen/`
itself (running `python loadgen/worker.py`, or `python -m` from inside `loadgen/`) would let this
directory shadow Locust, so loadgen is run with `python -m` from elsewhere.
"""
