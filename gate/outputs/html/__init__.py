"""report.html: figure data measured through `gate.metrics.derive` (`series`, `slices`), SVG
charts (`svg`), page parts (`page`); `gate.outputs.html.report.write_report` puts them together.
Nothing here prints or evaluates gates.
"""
