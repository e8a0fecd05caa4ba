"""What `batchgate run` and `batchgate sweep` orchestrate: child processes (the bundled server,
the load generator), one session per profile with its observers, the manifest, the live view and
the faults that end a run early. `gate.orchestrator.runner.execute` is the entry point."""
