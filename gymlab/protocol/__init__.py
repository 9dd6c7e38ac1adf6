"""Wire models only: pydantic, no I/O, no FastAPI. The names imported here are the package's API."""

from gymlab.protocol import failure_kinds
from gymlab.protocol.failure_kinds import Failure
from gymlab.protocol.gymnasium import (
    RESERVED_INFO_KEYS,
    GymnasiumResetRequest,
    GymnasiumResetResponse,
    GymnasiumStepRequest,
    GymnasiumStepResponse,
)
from gymlab.protocol.record import Rollout, StepRecord
from gymlab.protocol.resources import (
    SESSION_ID_KEY,
    AggregateMetrics,
    AggregateMetricsRequest,
    BaseRunRequest,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
)
from gymlab.protocol.responses import (
    ContentPart,
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    Message,
    NeMoGymResponse,
    Reasoning,
    ResponseCreateParams,
    Usage,
    assistant_message,
    dump_item,
    function_call,
    new_id,
)
from gymlab.protocol.sessions import (
    RESOURCES_COOKIE_HEADER,
    RESOURCES_SERVER_HEADER,
    EpisodeId,
    ResourcesCloseSessionRequest,
    ResourcesCloseSessionResponse,
    ResourcesSeedSessionRequest,
    ResourcesSeedSessionResponse,
    TaskId,
)
