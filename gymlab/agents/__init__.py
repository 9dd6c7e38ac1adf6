"""Agent servers: thin HTTP shells around ``gymlab.loop``."""
