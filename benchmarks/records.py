"""Records shaped as simple_agent writes a counter episode: benchmark and test input, no server runs."""

from __future__ import annotations

from typing import Any

from gymlab.protocol.record import Rollout

#: The tool of ``synthetic``'s episodes, as a counter environment declares it.
_INCREMENT = {
    "type": "function",
    "name": "increment",
    "description": "Add `by` to the counter and return the new count.",
    "parameters": {
        "type": "object",
        "properties": {"by": {"type": "integer"}},
        "required": ["by"],
        "additionalProperties": False,
    },
    "strict": True,
}


def synthetic(n_episodes: int, steps_per_episode: int) -> list[Rollout]:
    """Records shaped as simple_agent writes a counter episode, items and usage included (about 700 bytes of
    JSON a step): benchmark and test input, no server runs."""
    out = []
    for e in range(n_episodes):
        steps, items = [], []
        for i in range(steps_per_episode):
            last = i == steps_per_episode - 1
            if last:
                text = [{"type": "output_text", "text": f"The counter reads {i}.", "annotations": []}]
                action = [{"type": "message", "role": "assistant", "content": text, "id": f"msg_{e}_{i}"}]
                outputs: list[dict[str, Any]] = []
            else:
                call_id = f"call_{e:08x}{i:08x}"
                action = [{"type": "function_call", "name": "increment", "arguments": '{"by": 1}', "call_id": call_id}]
                action[0].update(id=f"fc_{e:08x}{i:08x}", status="completed")
                outputs = [{"type": "function_call_output", "call_id": call_id, "output": f'{{"count":{i + 1}}}'}]
            items += action + outputs
            step = {"index": i, "action": action, "reward": float(last), "terminated": last, "truncated": False}
            steps.append({**step, "info": {}, "tool_outputs": outputs, "tool_errors": 0, "duration_s": 0.015})
        prompt = f"The counter starts at 0. Use the increment tool, one step at a time, until it reads {i}."
        params = {"input": [{"role": "user", "content": prompt}], "tools": [_INCREMENT], "tool_choice": "auto"}
        usage = {"input_tokens": 56 * len(items), "output_tokens": 3 * len(steps), "total_tokens": 59 * len(items)}
        response = {"id": f"resp_{e:016x}", "created_at": 1.8e9, "model": "policy", "object": "response"}
        response.update(output=items, tools=[_INCREMENT], usage=usage, status="completed")
        record = {"responses_create_params": params, "response": response, "reward": 1.0, "mask_sample": False}
        record.update(terminated=True, truncated=False, steps=steps, duration_s=0.3, target=steps_per_episode - 1)
        record.update(_ng_task_index=e, _ng_rollout_index=0, env_name="counter")
        record["agent_ref"] = {"type": "responses_api_agents", "name": "simple_agent"}
        out.append(Rollout.model_validate(record))
    return out
