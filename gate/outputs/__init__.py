"""What CI and people read: JUnit XML, the Markdown summary with annotations, the terminal report.

Each module renders an `Evaluation`; none of them decides anything.
"""

from gate.outputs import junit, summary, terminal
from gate.outputs.text import describe, format_interval, format_verdict_value

__all__ = ["describe", "format_interval", "format_verdict_value", "junit", "summary", "terminal"]
