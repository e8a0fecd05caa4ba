"""The OpenAI Batch API on the reference server: `/v1/files` and `/v1/batches`.

Jobs run in the engine's `batch` priority class, fed as capacity frees under an in-flight bound,
and persist under a data directory (SQLite + files) so a killed server resumes them. Modules:
`limits` (flags and refusals), `multipart` (streaming uploads), `store` (SQLite and files),
`lines` (one input line), `runner` (the job loop), `result_log` (group commits), `job_stats`
(metrics), `service` (lifetime), `files` and `batches` (routes). Importing it starts nothing;
`BatchAPI.open()` does.
"""

from starlette.routing import Route

from reference_server.api.batch import batches, files
from reference_server.api.batch.limits import BatchLimits
from reference_server.api.batch.service import BatchAPI, DataDirError

__all__ = ["BatchAPI", "BatchLimits", "DataDirError", "routes"]


def routes() -> list[Route]:
    return [*files.routes(), *batches.routes()]
