"""Environment servers: a task run against a resources server and an agent (built-ins: ``gymlab.registry``)."""
