"""calibration.json as data: what a calibration of the target holds, and what it can serve for.

`content` is the file's shape, its typed values (`Calibration`) and the one parser of it,
`json_io` reads and writes the file, `references` holds the phase rules (which phase measured
which section, whether it was a valid measurement) and the lookups every reader asks (the unloaded
median, the saturated rate, the KV capacity, each with the reason there is none), and `procedure`
what a calibration sends (`CalibrationSpec`). Data only: measuring a target is
`gate.orchestrator.calibration`'s, judging a gate against it `gate.verdicts.relative`'s.
"""
