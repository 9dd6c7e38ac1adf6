"""The run engine below ``collection``, ``cluster`` and ``lab``: ``engine`` (workers, retries by failure
kind, the breaker), ``sinks`` (memory and JSONL), ``pool`` (replicas, the least busy first)."""
