"""Test helpers: configurable fakes for testing against gymlab over real HTTP (import the modules you need)."""


def __getattr__(name: str):
    # The session-contract checker, loaded on first use (it imports httpx).
    if name in ("check_resources_session_contract", "acheck_resources_session_contract"):
        from gymlab.testing import session_conformance

        return getattr(session_conformance, name)
    raise AttributeError(f"module 'gymlab.testing' has no attribute {name!r}")
