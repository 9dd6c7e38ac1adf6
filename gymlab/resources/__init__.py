"""Resources-server base classes."""
