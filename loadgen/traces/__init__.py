"""Production request traces: read a published trace, cut a window, rescale it, group sessions.

`read_trace(path, format)` validates a whole file into a `Trace` of `TraceRequest`s (formats:
Mooncake, Azure LLM inference, BurstGPT, Alibaba Bailian and our own `jsonl`; docs/traces.md);
`select_window`, `scale_time`, `time_scale_for_rate` and `scale_lengths` are pure functions over
them; `session_groups` orders multi-turn conversations; `packaged_trace_path` finds the shipped
excerpts (their sources and licenses: `loadgen/data/ATTRIBUTION.md`). Nothing here sends requests
or builds prompt text (`loadgen.prefix_text`).
"""

from importlib import resources
from pathlib import Path

from loadgen.errors import ConfigError
from loadgen.traces.formats import FORMATS, detect_format, read_trace
from loadgen.traces.request import Trace, TraceRequest
from loadgen.traces.sessions import TraceSession, session_groups
from loadgen.traces.window import (
    ScaledLengths,
    TraceWindow,
    scale_lengths,
    scale_time,
    select_window,
    time_scale_for_rate,
)

__all__ = [
    "FORMATS",
    "PACKAGED_TRACES",
    "ScaledLengths",
    "Trace",
    "TraceRequest",
    "TraceSession",
    "TraceWindow",
    "detect_format",
    "packaged_trace_path",
    "read_trace",
    "scale_lengths",
    "scale_time",
    "select_window",
    "session_groups",
    "time_scale_for_rate",
]

# name -> file under loadgen/data/
PACKAGED_TRACES = {
    "mooncake_conversation_excerpt": "mooncake_conversation_excerpt.jsonl",
    "azure_conv_2023_excerpt": "azure_conv_2023_excerpt.csv",
}


def packaged_trace_path(name: str) -> Path:
    """The path of a shipped excerpt, by name (with or without its file extension).

    Found through `importlib.resources`, so a default trace profile works from any directory.
    """
    file = PACKAGED_TRACES.get(name)
    if file is None and name in PACKAGED_TRACES.values():
        file = name
    if file is None:
        raise ConfigError(
            f"no packaged trace {name!r}; the package ships {', '.join(PACKAGED_TRACES)}"
        )
    resource = resources.files("loadgen").joinpath("data").joinpath(file)
    if not resource.is_file():
        raise ConfigError(f"the packaged trace {file} is missing from this installation")
    # setuptools installs package data as plain files, so the Traversable is a real path (an
    # installation zipped into one archive is not supported).
    return Path(str(resource))
