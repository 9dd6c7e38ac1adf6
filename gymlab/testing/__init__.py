"""Test helpers for testing against gymlab over real HTTP (import the modules you need)."""

from gymlab.testing.session_conformance import acheck_resources_session_contract, check_resources_session_contract

__all__ = ["acheck_resources_session_contract", "check_resources_session_contract"]
