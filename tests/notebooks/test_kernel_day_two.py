"""Day two in a real Jupyter kernel: re-serve a fixed class, interrupt a run, a failing verify.

The kernel is driven the way JupyterLab drives it (execute requests, an interrupt request), and the
test reads what the cell would show: its output lines, its error, the kernel's CPU time.
"""

from __future__ import annotations

import os
import queue
import textwrap
import time

import httpx
import pytest
from jupyter_client import KernelManager

from gymlab.testing.workers import wait_until

SETUP = """
from gymlab import Lab, BaseVerifyRequest, BaseVerifyResponse
from gymlab.examples import example_rows, load_environment
calc = load_environment("calculator")
counter = load_environment("counter")
lab = Lab()
"""


class Kernel:
    """A real ipykernel; ``run`` executes a cell and returns its reply and everything it showed."""

    def __init__(self):
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(cwd=os.getcwd())
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=180)

    @property
    def pid(self) -> int:
        return self.manager.provisioner.process.pid

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def submit(self, code: str) -> str:
        return self.client.execute(textwrap.dedent(code))

    def collect(self, msg_id: str, timeout: float = 300) -> tuple[dict, list[dict]]:
        """The execute reply of ``msg_id`` and the iopub messages the cell produced."""
        outputs: list[dict] = []
        deadline = time.monotonic() + timeout
        idle = False
        while not idle:
            try:
                msg = self.client.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("the cell did not finish in time") from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "status" and msg["content"]["execution_state"] == "idle":
                idle = True
            elif kind in ("stream", "error", "display_data", "execute_result"):
                outputs.append(msg)
        while True:  # skip replies to other requests (wait_for_ready may leave a kernel_info_reply)
            reply = self.client.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"], outputs

    def run(self, code: str, timeout: float = 300) -> tuple[dict, list[dict]]:
        return self.collect(self.submit(code), timeout)

    def value(self, expression: str):
        reply, outputs = self.run(f"print(repr({expression}))")
        assert reply["status"] == "ok", reply
        text = "".join(m["content"]["text"] for m in outputs if m["msg_type"] == "stream")
        return eval(text.strip())  # the test's own kernel printing plain literals

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def shown_lines(outputs: list[dict]) -> list[str]:
    """Every line the cell showed: streams, results and the error's traceback."""
    lines: list[str] = []
    for msg in outputs:
        content = msg["content"]
        if msg["msg_type"] == "stream":
            lines += content["text"].splitlines()
        elif msg["msg_type"] == "error":
            lines += "\n".join(content["traceback"]).splitlines()
        else:
            lines += content.get("data", {}).get("text/plain", "").splitlines()
    return [line for line in lines if line.strip()]


@pytest.fixture(scope="module")
def kernel():
    k = Kernel()
    reply, _ = k.run(SETUP)
    assert reply["status"] == "ok", reply
    yield k
    k.close()


def test_reserving_a_fixed_class_keeps_the_agent_bound_to_it(kernel):
    reply, _ = kernel.run(
        """
        class Env(calc.CalculatorServer):
            async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
                answer = await super().verify(body)
                return answer.model_copy(update={"reward": 0.0})  # the bug

        env = lab.serve(Env, name="env")
        agent = lab.serve_agent("simple_agent", name="agent", resources=env, model=lab.serve_model(calc.policy))
        row = example_rows("calculator")[0]
        before, url_before = agent.run(row).reward, env.url
        """
    )
    assert reply["status"] == "ok", reply
    reply, outputs = kernel.run(
        """
        class Env(calc.CalculatorServer):  # fixed: the parent's verify
            pass

        lab.serve(Env, name="env")
        after = agent.run(row).reward  # the agent made before the fix, not served again
        """
    )
    assert reply["status"] == "ok" and not shown_lines(outputs), shown_lines(outputs)
    assert kernel.value("(before, after, env.url == url_before, type(env.server).__name__)") == (0.0, 1.0, True, "Env")
    url = kernel.value("env.url")
    assert httpx.post(url + "/square", json={"value": 5}).json() == {"result": 25}  # still served over HTTP


def test_an_interrupt_stops_the_run_and_frees_the_cpu_and_the_sessions(kernel):
    reply, _ = kernel.run(
        """
        import time

        def burning(request):  # a slow, CPU-bound policy: 40 ms of work per call
            end = time.process_time() + 0.04
            while time.process_time() < end:
                pass
            return counter.policy(request)

        slow_env = lab.serve(counter.CounterServer, name="slow_env")
        slow = lab.serve_agent("simple_agent", name="slow", resources=slow_env, model=lab.serve_model(burning, name="burning"))
        """
    )
    assert reply["status"] == "ok", reply
    url = kernel.value("slow_env.url")
    held = lambda: httpx.get(url + "/health").json()["sessions"]["held"]  # noqa: E731
    msg_id = kernel.submit("run = lab.run_many(slow, example_rows('counter'), repeats=100, concurrency=8)")
    wait_until(lambda: held() > 0, 120, "the run under way (its episodes holding sessions)")
    kernel.manager.interrupt_kernel()
    t0 = time.monotonic()
    reply, outputs = kernel.collect(msg_id, timeout=120)
    returned_after = time.monotonic() - t0
    assert reply["status"] == "error" and reply["ename"] == "Interrupted", reply  # a KeyboardInterrupt
    (line,) = shown_lines(outputs)  # one line: no traceback of gymlab's frames under it
    assert "run cancelled:" in line and "running episode(s) stopped" in line, line
    assert "running episode(s) stopped" in reply["evalue"]  # the interrupt itself says what it stopped
    assert returned_after < 60, returned_after  # promptly: a bound for a loaded machine, not a benchmark
    wait_until(lambda: held() == 0, 60, "every session released after the interrupt")
    # Idle: over the next two seconds the kernel burns a small fraction of a core. Without the
    # cancel, 2,000 episodes of 80 ms of policy CPU each would keep it busy for minutes.
    cpu0, wall0 = kernel.cpu_seconds(), time.monotonic()
    while time.monotonic() - wall0 < 2.0:
        time.sleep(0.1)  # a measurement window, not a wait for a condition
    assert kernel.cpu_seconds() - cpu0 < 0.5
    assert kernel.value("len(lab.last_run) < 2000 and 'run' not in globals()")  # stopped early, nothing assigned


def test_a_failing_verify_shows_a_few_lines_and_logs_keep_the_traces(kernel):
    reply, outputs = kernel.run(
        """
        class Broken(calc.CalculatorServer):
            async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
                return 1 / 0

        broken = lab.serve(Broken, name="broken")
        bad = lab.serve_agent("simple_agent", name="bad", resources=broken, model=lab.serve_model(calc.policy, name="calc_model"))
        failed = lab.run_many(bad, example_rows("calculator")[:4], repeats=5)
        """
    )
    assert reply["status"] == "ok", reply
    lines = shown_lines(outputs)
    assert 1 <= len(lines) <= 3, lines
    assert "20 of 20 episodes failed (verifier_error 20)" in lines[-1]
    assert kernel.value("(len(failed), failed.failures)") == (20, {"verifier_error": 20})
    assert kernel.value("sum('ZeroDivisionError' in e.trace for e in lab.logs(last=None))") >= 20
    for cell in ("bad.run(example_rows('calculator')[0])", "broken.post('/verify', failed[0].model_dump(mode='json'))"):
        reply, outputs = kernel.run(cell)
        assert reply["status"] == "error" and reply["ename"] == "ServerError", reply
        lines = shown_lines(outputs)
        assert len(lines) <= 12, lines  # the cell's frame and the error, not gymlab's internals
        assert "in verify" in reply["evalue"], reply["evalue"]  # the user's own frame, named in the error
        assert not any("aiohttp" in line or "concurrent/futures" in line for line in lines), lines


def test_errors_name_the_cell_and_agent_run_shows_only_the_users_frames(kernel):
    reply, _ = kernel.run(
        """
        class Cellular(calc.CalculatorServer):
            async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
                return 1 / 0

        cellular = lab.serve(Cellular, name="cellular")
        cell_model = lab.serve_model(calc.policy, name="cell_model")
        cell_agent = lab.serve_agent("simple_agent", name="cell_agent", resources=cellular, model=cell_model)
        """
    )
    assert reply["status"] == "ok", reply
    cell = f"Cell In[{reply['execution_count']}], line 3, in verify"  # IPython's name, not its temp file
    reply, outputs = kernel.run("cell_agent.run(example_rows('calculator')[0])")
    assert reply["status"] == "error" and reply["ename"] == "ServerError", reply
    assert cell in reply["evalue"], reply["evalue"]
    lines = shown_lines(outputs)
    assert not any("ipykernel_" in line for line in lines), lines
    assert not any(f"gymlab{os.sep}" in line for line in lines), lines  # only the user's frames
    assert kernel.value("lab.logs()[-1].line").endswith(f"({cell})")


def test_interrupting_agent_run_prints_one_line(kernel):
    reply, _ = kernel.run(
        """
        import threading
        gate = threading.Event()

        def waiting(request):
            gate.wait(60)
            return calc.policy(request)

        waiting_agent = lab.serve_agent(
            "simple_agent", name="waiting_agent", resources=lab.serve(calc.CalculatorServer, name="calc_w"),
            model=lab.serve_model(waiting, name="waiting_model"),
        )
        """
    )
    assert reply["status"] == "ok", reply
    url = kernel.value("lab.servers['calc_w'].url")
    held = lambda: httpx.get(url + "/health").json()["sessions"]["held"]  # noqa: E731
    msg_id = kernel.submit("waiting_agent.run(example_rows('calculator')[0])")
    wait_until(lambda: held() == 1, 120, "the episode under way")
    kernel.manager.interrupt_kernel()
    reply, outputs = kernel.collect(msg_id, timeout=120)
    kernel.run("gate.set()")
    assert reply["status"] == "error" and reply["ename"] == "Interrupted", reply  # a KeyboardInterrupt
    # the whole output: one line, no traceback under it
    assert shown_lines(outputs) == ["gymlab: interrupted: waiting_agent's episode stopped and its session closed"]
    wait_until(lambda: held() == 0, 60, "the episode's session closed")
