"""Stage 1 of the gate: gates.yaml becomes a validated `GatesFile`.

`model` holds the value objects (GatesFile, Gate, Scope, Settings, Slos, Regression), `reader`
the YAML composition and typed field readers, `definition` one gate's parser, `presets` the
presets and profile overrides, `file` the entry points (`load`, `loads`). Nothing here reads a
run or judges.
"""
