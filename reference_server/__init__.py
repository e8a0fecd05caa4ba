"""batchgate's reference server: a paged-KV engine with three batching policies."""

__all__: list[str] = []
