"""batchgate's load generator: Locust profiles, open-loop arrivals, a token-timing client."""

__all__: list[str] = []
