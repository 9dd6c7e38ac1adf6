# The spec's "Seed/Verify State" sample and its multi-worker entrypoint, as the spec writes them;
# only the import lines changed (nemo_gym -> gymlab, and the reader's helpers imported from a sibling).
from typing import Any

from fastapi import Request
from pydantic import Field
from spec_sample_helpers import SeedRequest, VerifyRequest, grade, initialize, make_verify_response

from gymlab import SESSION_ID_KEY, BaseSeedSessionResponse, SimpleResourcesServer


class StatefulServer(SimpleResourcesServer):
    session_state: dict[str, Any] = Field(default_factory=dict)
    async def seed_session(self, request: Request, body: SeedRequest):
        session_id = request.session[SESSION_ID_KEY]
        self.session_state[session_id] = initialize(body)
        return BaseSeedSessionResponse()
    async def verify(self, request: Request, body: VerifyRequest):
        session_id = request.session[SESSION_ID_KEY]
        try:
            reward = grade(self.session_state[session_id], body)
            return make_verify_response(body, reward)
        finally:
            self.session_state.pop(session_id, None)
from gymlab.utils import is_nemo_gym_fastapi_entrypoint  # noqa: E402  (the spec sample's own order)

if __name__ == "__main__":
    StatefulServer.run_webserver()
elif is_nemo_gym_fastapi_entrypoint(__file__):
    # With num_workers > 1, uvicorn imports this module in each worker and serves its module-level `app`.
    app = StatefulServer.run_webserver()  # noqa: F401
