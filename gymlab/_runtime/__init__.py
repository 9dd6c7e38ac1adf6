"""Server runtime (private): app factory, sessions, uvicorn runner."""
