"""The notebook layer: Lab and server handles (heavier parts are imported lazily)."""

from gymlab.lab.lab import AgentHandle, Lab, ServerHandle

__all__ = ["AgentHandle", "Lab", "ServerHandle"]
