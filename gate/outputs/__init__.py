"""Stage 5 of the gate: an `Evaluation` becomes what CI and people read.

`files` writes verdicts.json, junit.xml, summary.md (and the GitHub step summary); `junit`,
`summary`, `terminal` render; `text` holds the shared phrasing; `html/` builds report.html.
None of them decides anything.
"""
