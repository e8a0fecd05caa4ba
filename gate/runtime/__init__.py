"""The gate process's own runtime settings: how its allocator and numpy get memory for a
check's arrays (set once by `gate.cli`, before any check runs)."""
