"""The reference server's HTTP layer: OpenAI-compatible API, /metrics and /admin over the engine.

Importing it does not start anything; `python -m reference_server` (cli.main) does.
"""

from reference_server.api.app import ServerState, build_app, build_state
from reference_server.api.cli import build_parser, main, parse_configs
from reference_server.api.embedding_batcher import EmbeddingBatcher
from reference_server.api.errors import APIError
from reference_server.api.metrics import ServerMetrics
from reference_server.api.server_config import ServerConfig, ServerConfigError

__all__ = [
    "APIError",
    "EmbeddingBatcher",
    "ServerConfig",
    "ServerConfigError",
    "ServerMetrics",
    "ServerState",
    "build_app",
    "build_parser",
    "build_state",
    "main",
    "parse_configs",
]
