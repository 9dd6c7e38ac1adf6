"""Environment variables a server process is started with (read by ``server`` and ``workers``)."""

#: ``gymlab serve`` passes each server process its config as JSON in this variable.
CONFIG_ENV = "GYMLAB_SERVER_CONFIG"
