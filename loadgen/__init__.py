"""batchgate's load generator: Locust profiles, open-loop arrivals, a token-timing client.

Importing the package imports only pure modules (errors, profiles, records): never locust or
gevent, which monkey-patch the standard library. The load itself runs in its own process:
`python -m loadgen` (see `loadgen.cli`) or `locust -f loadgen/locustfile.py`.
"""

from loadgen.errors import ConfigError, LoadgenError, TargetUnreachableError
from loadgen.profiles import PROFILES, ProfileSpec, resolve
from loadgen.records import STATUSES, RequestRecord, validate_load_json, validate_record

__all__ = [
    "PROFILES",
    "STATUSES",
    "ConfigError",
    "LoadgenError",
    "ProfileSpec",
    "RequestRecord",
    "TargetUnreachableError",
    "resolve",
    "validate_load_json",
    "validate_record",
]
