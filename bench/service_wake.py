"""Service figure: a waiting REST long-poll and an SSE stream are told of a send (issue 3).

`agentpost serve` as a real process; three agents, each its own httpx client (own connections):
`bench-sender`, `bench-poller` (REST long-poll) and `bench-streamer` (SSE). All timestamps are
on this process's one `time.perf_counter()` clock.

- long-poll: each trial, the poller's `GET /v1/inbox/wait?timeout_s=10` is sent; 20 ms later
  (it is parked in the server by then) the sender's `POST /v1/messages` to the poller; measured
  from the moment the send was issued (the figure) and from the moment its answer was back,
  until the wait's answer (with that message) is here;
- SSE: one `GET /v1/events` stream of the streamer stays open; each trial, the sender's `POST`
  to the streamer, 20 ms after the previous event; measured until that message's
  `message.created` event has arrived.

The waiter's answer can beat the sender's own answer home, so "from the answer" can be negative.
"""

from __future__ import annotations

import json
import time

import anyio
import anyio.abc
import httpx

from bench.common import RAISED_LIMITS, Report, expect, log, ms, pct, scratch_home
from bench.serve import Serve, running

NAME = "service_wake"
TRIALS = 300
WARMUP = 10
SETTLE_S = 0.02
P99_TARGET_S = 0.020


class Trials:
    """From the send issued and from its answer, to the waiter being told; per trial."""

    def __init__(self) -> None:
        self.from_call: list[float] = []
        self.from_return: list[float] = []

    def add(self, t_call: float, t_return: float, t_told: float) -> None:
        self.from_call.append(t_told - t_call)
        self.from_return.append(t_told - t_return)


async def _send(sender: httpx.AsyncClient, to: str, body: str) -> tuple[float, float, str]:
    """Send; when it was issued, when its answer was here, and the message's id."""
    t_call = time.perf_counter()
    answer = await sender.post("/v1/messages", json={"to": to, "body": body})
    t_return = time.perf_counter()
    expect(answer.status_code == 201, f"send answered {answer.status_code}: {answer.text}")
    return t_call, t_return, str(answer.json()["id"])


async def long_polls(sender: httpx.AsyncClient, poller: httpx.AsyncClient) -> Trials:
    trials = Trials()
    for trial in range(WARMUP + TRIALS):
        body = f"wake up {trial}"
        told: dict[str, float] = {}

        async def wait(body: str = body, told: dict[str, float] = told) -> None:
            answer = await poller.get("/v1/inbox/wait", params={"timeout_s": 10})
            told["t"] = time.perf_counter()
            expect(answer.status_code == 200, f"wait answered {answer.status_code}")
            got = answer.json()
            expect(not got["timed_out"], "wait timed out")
            bodies = [m["body"] for m in got["messages"]]
            expect(bodies == [body], f"woke with {bodies}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.sleep(SETTLE_S)
            t_call, t_return, _ = await _send(sender, "bench-poller", body)
        if trial >= WARMUP:
            trials.add(t_call, t_return, told["t"])
    return trials


async def _stream(
    streamer: httpx.AsyncClient, out: anyio.abc.ObjectSendStream[tuple[float, str]]
) -> None:
    """Read the SSE stream; each `message.created` event: (arrival time, message id) to `out`."""
    async with streamer.stream("GET", "/v1/events", timeout=None) as answer:
        expect(answer.status_code == 200, f"events answered {answer.status_code}")
        event = ""
        async for line in answer.aiter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "message.created":
                t = time.perf_counter()
                data = json.loads(line.split(":", 1)[1])
                await out.send((t, str(data["message_id"])))
            elif not line:
                event = ""


async def _sse(sender: httpx.AsyncClient, streamer: httpx.AsyncClient) -> Trials:
    trials = Trials()
    send, receive = anyio.create_memory_object_stream[tuple[float, str]](100)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_stream, streamer, send)
        await anyio.sleep(0.5)  # the stream is open and has its starting cursor
        for trial in range(WARMUP + TRIALS):
            body = f"event {trial}"
            t_call, t_return, sent = await _send(sender, "bench-streamer", body)
            with anyio.fail_after(10):
                t_told, got = await receive.receive()
            expect(got == sent, f"event for {got!r}, not {sent!r}")
            if trial >= WARMUP:
                trials.add(t_call, t_return, t_told)
            await anyio.sleep(SETTLE_S)
        tg.cancel_scope.cancel()
    return trials


def _rows(report: Report, what: str, trials: Trials) -> None:
    p50, p99 = pct(trials.from_call, 50), pct(trials.from_call, 99)
    report.add(
        f"service_wake: {what} told of a send, from the send issued, p50 / p99 ({TRIALS} trials)",
        f"p99 ≤ {ms(P99_TARGET_S)}",
        f"{ms(p50)} / {ms(p99)} (max {ms(max(trials.from_call))})",
        p99 <= P99_TARGET_S,
    )
    report.add(
        f"service_wake: {what} told of a send, from the send's answer, p50 / p99",
        "(reported)",
        f"{ms(pct(trials.from_return, 50))} / {ms(pct(trials.from_return, 99))}",
    )


async def run() -> Report:
    report = Report(NAME, config=dict(RAISED_LIMITS))
    with scratch_home(NAME) as home:
        async with running(home) as server:
            keys = await server.create_agents(["bench-sender", "bench-poller", "bench-streamer"])
            sender = server.client(keys["bench-sender"])
            poller = server.client(keys["bench-poller"])
            streamer = server.client(keys["bench-streamer"])
            log(NAME, f"{TRIALS} long-poll trials")
            polls = await long_polls(sender, poller)
            log(NAME, f"{TRIALS} SSE trials")
            events = await _sse(sender, streamer)
            _check_quiet(server)

    _rows(report, "REST long-poll (GET /v1/inbox/wait)", polls)
    _rows(report, "SSE stream (GET /v1/events)", events)
    early = sum(1 for v in polls.from_return if v < 0)
    report.notes.append(
        f"{WARMUP} warm-up trials each; {SETTLE_S * 1000:.0f} ms between a wait's request and "
        f"the send; {early} of {TRIALS} long-polls answered before the send's own answer"
    )
    report.data = {
        "long_poll": vars(polls),
        "sse": vars(events),
    }
    return report


def _check_quiet(server: Serve) -> None:
    expect(server.process.returncode is None, f"the server exited:\n{server.log_tail()}")
