"""Test helpers for testing against gymlab over real HTTP (import the modules you need)."""

from gymlab.testing.session_conformance import check_resources_session_contract

__all__ = ["check_resources_session_contract"]
