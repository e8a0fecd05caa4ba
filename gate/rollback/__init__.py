"""Rollback: a named batching preset applied to a live server (`live`), or spelled as the
nearest settings of servers that cannot take it live (`equivalents`)."""
