"""The engine core in its own process: the scheduler, the model runner and the step records run
in a child process, and the API process talks to it over a pipe.

Why: the HTTP layer and the step loop in one interpreter take turns on one GIL, so streaming
delivered a fraction of the offline engine's tokens/s and scheduling lost CPU time to HTTP.
`wire` is the message format, `core` the child's loop, `client` the API process's handle with
AsyncEngine's interface (docs/engine.md, "The engine core process").
"""

from reference_server.engine_core.client import EngineCoreClient

__all__ = ["EngineCoreClient"]
