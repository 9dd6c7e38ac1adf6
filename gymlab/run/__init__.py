"""The run engine below ``collection``, ``cluster`` and ``lab``: ``engine``, ``sinks``, ``pool``."""
