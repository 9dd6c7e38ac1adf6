"""``gymlab.failure_kinds``: the failure-kind registry (see ``gymlab.protocol.failure_kinds``)."""

from gymlab.protocol.failure_kinds import (
    FAILURE_KINDS,
    STAGES,
    Failure,
    describe,
    is_server_kind,
    validate_failure_kind,
)

__all__ = ["FAILURE_KINDS", "STAGES", "Failure", "describe", "is_server_kind", "validate_failure_kind"]
