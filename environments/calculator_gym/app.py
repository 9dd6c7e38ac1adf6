"""The spec's CalculatorEnv: ``square`` as a Gymnasium action; reward 1.0 on a correct final answer.

The spec's env paid 1.0 for any final answer (``gymlab probe`` flagged every answering probe, the
empty answer and the refusal included), so this one pays when the answer's only number is the row's
``expected_answer``.
"""

import json
import re

from gymlab import GymnasiumServer, function_call


class CalculatorEnv(GymnasiumServer):
    async def step(self, action, metadata, session_id=None):
        calls = [item for item in action.output if item.type == "function_call"]
        if calls:
            outputs = []
            for call in calls:
                args = json.loads(call.arguments)
                if call.name == "square":
                    result = {"result": args["value"] ** 2}
                else:
                    result = {"error": f"Unknown action: {call.name}"}
                outputs.append(self.tool_output(call, result))
            return None, 0.0, False, False, {"tool_outputs": outputs}
        numbers = re.findall(r"-?\d+", action.output_text)
        correct = "expected_answer" in metadata and numbers == [str(metadata["expected_answer"])]
        return None, float(correct), True, False, {"correct": correct}


def policy(request):
    """Rule-based model: square the last number the user gave, then report the result."""
    items = request.input_items()
    last = items[-1] if items else None
    if last is not None and last.type == "function_call_output":
        return f"The answer is {json.loads(last.output).get('result')}."
    text = " ".join(i.text for i in items if i.type == "message" and i.role == "user")
    numbers = re.findall(r"-?\d+", text)
    if numbers:
        return [function_call("square", {"value": int(numbers[-1])})]
    return "I cannot help with that."


if __name__ == "__main__":
    CalculatorEnv.run_webserver()
