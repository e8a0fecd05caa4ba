"""The pieces of report.html: figure data measured through `gate.derive`, SVG charts, page parts.

`gate.report_html.write_report` puts them together; nothing here prints or evaluates gates.
"""

from gate.report.series import Figure, TimeAxis, profile_figures, time_axis
from gate.report.slices import clip_profile
from gate.report.svg import Band, Chart, Line, render_chart

__all__ = [
    "Band",
    "Chart",
    "Figure",
    "Line",
    "TimeAxis",
    "clip_profile",
    "profile_figures",
    "render_chart",
    "time_axis",
]
