"""Keys: who may do what over REST, lockout after failures, and the owner's first start."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from service_process import Service, running_service

pytestmark = pytest.mark.anyio


def error_of(answer: object) -> str:
    code: str = answer.json()["error"]["code"]  # type: ignore[attr-defined]
    return code


async def test_a_request_without_a_key_is_unauthenticated(service: Service) -> None:
    answer = await service.client().get("/v1/inbox")
    assert answer.status_code == 401
    assert error_of(answer) == "unauthenticated"
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")


async def test_an_unknown_key_is_unauthenticated(service: Service) -> None:
    answer = await service.client("ap_" + "x" * 43).get("/v1/inbox")
    assert answer.status_code == 401


async def test_a_revoked_key_is_refused_on_the_next_request(service: Service) -> None:
    created = (await service.admin.post("/v1/admin/agents", json={"name": "alice"})).json()
    alice = service.client(created["key"]["key"])
    assert (await alice.get("/v1/inbox")).status_code == 200
    revoked = await service.admin.delete(f"/v1/admin/keys/{created['key']['id']}")
    assert revoked.status_code == 200
    assert (await alice.get("/v1/inbox")).status_code == 401


@pytest.mark.parametrize(
    ("change", "sql"),
    [
        ("revoked", "UPDATE keys SET revoked_at = 1.0 WHERE agent = 'alice'"),
        ("disabled", "UPDATE agents SET disabled_at = 1.0 WHERE name = 'alice'"),
    ],
)
async def test_a_key_another_process_turned_off_is_refused_on_the_next_request(
    service: Service, change: str, sql: str
) -> None:
    """The server remembers whom a key stood for between requests that write nothing of
    accounts (peeks); a commit of any other process on the file (here a plain sqlite3 one, at
    once before the request) undoes that."""
    alice = await service.agent("alice")
    for _ in range(3):
        assert (await alice.get("/v1/inbox", params={"peek": "true"})).status_code == 200
    db = sqlite3.connect(service.home / "agentpost.db", timeout=30)
    try:
        db.execute(sql)
        db.commit()
    finally:
        db.close()
    answer = await alice.get("/v1/inbox", params={"peek": "true"})
    assert answer.status_code == 401, change
    assert error_of(answer) == "unauthenticated"


async def turn_off(service: Service, created: dict[str, Any], how: str) -> None:
    """Revoke alice's key (`created` came with it), or disable alice."""
    if how == "key_revoked":
        answer = await service.admin.delete(f"/v1/admin/keys/{created['key']['id']}")
    else:
        answer = await service.admin.post("/v1/admin/agents/alice/disable")
    assert answer.status_code == 200, answer.text


TURNED_OFF = pytest.mark.parametrize("how", ["key_revoked", "agent_disabled"])


@TURNED_OFF
async def test_a_long_poll_open_when_its_key_is_turned_off_hands_over_nothing_and_says_why(
    service: Service, how: str
) -> None:
    """Refused as the key's next request would be: `details.reason` tells the client to stop
    retrying, not to wait again."""
    created = (await service.admin.post("/v1/admin/agents", json={"name": "alice"})).json()
    alice = service.client(created["key"]["key"])
    bob = await service.agent("bob")
    async with anyio.create_task_group() as tg:
        answers: list[Any] = []

        async def wait() -> None:
            answers.append(await alice.get("/v1/inbox/wait", params={"timeout_s": 30}))

        tg.start_soon(wait)
        await anyio.sleep(0.3)  # the long-poll is open
        await turn_off(service, created, how)
        await bob.post("/v1/messages", json={"to": "alice", "body": "for alice's eyes"})
    (answer,) = answers
    assert answer.status_code == 401
    assert error_of(answer) == "unauthenticated"
    assert answer.json()["error"]["details"] == {"reason": how}
    assert answer.json() == (await alice.get("/v1/inbox")).json()
    assert "for alice's eyes" not in answer.text
    db = sqlite3.connect(service.home / "agentpost.db")
    read = "SELECT state FROM deliveries WHERE recipient = 'alice' AND state != 'queued'"
    assert db.execute(read).fetchall() == []  # (a disabled agent is sent nothing at all)


@TURNED_OFF
async def test_an_event_stream_open_when_its_key_is_turned_off_ends_saying_why(
    tmp_path: Path, how: str
) -> None:
    """Within a heartbeat, or at once when news wakes it (none comes for a disabled agent)."""
    async with running_service(tmp_path, {"AGENTPOST_HEARTBEAT_S": "0.3"}) as service:
        await _an_event_stream_ends_saying_why(service, how)


async def _an_event_stream_ends_saying_why(service: Service, how: str) -> None:
    created = (await service.admin.post("/v1/admin/agents", json={"name": "alice"})).json()
    key = created["key"]["key"]
    bob = await service.agent("bob")
    lines: list[str] = []
    async with service.client(key).stream("GET", "/v1/events") as stream:
        reading = stream.aiter_lines()
        assert await anext(reading) == ": agentpost events"  # open: it starts at now
        await turn_off(service, created, how)
        await bob.post("/v1/messages", json={"to": "alice", "body": "for alice's eyes"})
        with anyio.fail_after(10):
            lines = [line async for line in reading]  # to the end: the service closes it
    assert "event: error" in lines
    assert "message.created" not in "".join(lines)
    data = next(line for line in lines if line.startswith("data: "))
    error = json.loads(data.removeprefix("data: "))["error"]
    assert (error["code"], error["details"]) == ("unauthenticated", {"reason": how})

    from agentpost import AsyncClient
    from agentpost.domain.errors import AgentpostError

    async with AsyncClient(service.url, key) as client:  # the client raises, and stops
        with pytest.raises(AgentpostError) as refused:
            async for _ in client.events():
                pass
    assert refused.value.code.value == "unauthenticated"
    assert refused.value.details == {"reason": how}


@TURNED_OFF
async def test_what_a_key_holds_open_ends_at_once_when_it_is_turned_off_with_no_news(
    service: Service, how: str
) -> None:
    """A wait, a question awaiting its answer, an event stream: each ended only at its next
    heartbeat (15 s), unless news woke it. Each now ends at once, refused as the key's next
    request is."""
    created = (await service.admin.post("/v1/admin/agents", json={"name": "alice"})).json()
    alice = service.client(created["key"]["key"])
    await service.agent("bob")
    answers: list[httpx.Response] = []
    lines: list[str] = []

    async def events() -> None:
        async with alice.stream("GET", "/v1/events") as stream:
            lines.extend([line async for line in stream.aiter_lines()])

    question = {"to": "bob", "question": "ship it?", "timeout_s": 60}
    with anyio.fail_after(6):  # well within the 15 s heartbeat
        async with anyio.create_task_group() as tg:
            wait = alice.get("/v1/inbox/wait", params={"timeout_s": 60})
            tg.start_soon(answers_of, answers, wait)
            tg.start_soon(answers_of, answers, alice.post("/v1/requests", json=question))
            tg.start_soon(events)
            await anyio.sleep(1)  # all three are held open
            await turn_off(service, created, how)
    refused = (await alice.get("/v1/inbox")).json()
    assert [(a.status_code, a.json()) for a in answers] == [(401, refused)] * 2
    data = next(line for line in lines if line.startswith("data: "))
    assert json.loads(data.removeprefix("data: ")) == refused


async def answers_of(
    answers: list[httpx.Response], request: Coroutine[Any, Any, httpx.Response]
) -> None:
    answers.append(await request)


async def test_an_agent_may_hold_several_keys(service: Service) -> None:
    await service.create_agent("alice")
    issued = await service.admin.post("/v1/admin/agents/alice/keys", json={"label": "laptop"})
    assert issued.status_code == 201
    second = service.client(issued.json()["key"])
    me = (await second.get("/v1/me")).json()
    assert me["name"] == "alice"


async def test_a_disabled_agents_keys_stop_working_and_it_is_never_deleted(
    service: Service,
) -> None:
    alice = await service.agent("alice")
    assert (await service.admin.post("/v1/admin/agents/alice/disable")).status_code == 200
    assert (await alice.get("/v1/inbox")).status_code == 401
    listed = (await service.admin.get("/v1/admin/agents")).json()["agents"]
    assert [a["disabled"] for a in listed if a["name"] == "alice"] == [True]
    assert (await service.admin.post("/v1/admin/agents/alice/enable")).status_code == 200
    assert (await alice.get("/v1/inbox")).status_code == 200


async def test_an_agent_key_cannot_administer_and_each_attempt_is_audited(
    service: Service,
) -> None:
    alice = await service.agent("alice")
    for method, path in [
        ("POST", "/v1/admin/agents"),
        ("GET", "/v1/admin/agents"),
        ("GET", "/v1/admin/audit"),
        ("GET", "/v1/admin/keys"),
        ("GET", "/v1/admin/usage"),
        ("POST", "/v1/admin/agents/alice/disable"),
    ]:
        body = {"name": "eve"} if method == "POST" and path.endswith("agents") else None
        answer = await alice.request(method, path, json=body)
        assert answer.status_code == 403, (method, path, answer.text)
        assert error_of(answer) == "forbidden"
    refused = await service.admin.get("/v1/admin/audit", params={"action": "admin.refused"})
    entries = refused.json()["entries"]
    assert [(e["actor"], e["target"], e["detail"]["act"]) for e in entries] == [
        ("alice", "alice", "disable_agent"),
        ("alice", None, "usage"),
        ("alice", None, "list_keys"),
        ("alice", None, "audit_log"),
        ("alice", None, "list_agents"),
        ("alice", "eve", "create_agent"),
    ]
    assert {e["ip"] for e in entries} == {"127.0.0.1"}


NOT_JSON = {"Content-Type": "application/json"}
"""Sent with a body that is no JSON."""


async def test_a_malformed_admin_request_with_an_agent_key_is_refused_and_audited_as_any(
    service: Service,
) -> None:
    """It was answered `invalid_argument`, saying how to put it right, and left no trace in
    the audit log, which keeps every attempt at an admin act."""
    alice = await service.agent("alice")
    await service.agent("bob")
    attempts: list[tuple[str, str, dict[str, Any]]] = [
        ("PUT", "/v1/admin/agents/bob/limits", {"json": {"send_rate": 1}}),
        ("POST", "/v1/admin/agents/alice/keys", {"content": b"{", "headers": NOT_JSON}),
        ("POST", "/v1/admin/agents", {"json": {"nme": "eve"}}),
        ("GET", "/v1/admin/audit", {"params": {"limit": "many"}}),
        ("PUT", "/v1/admin/blocks/bob/alice", {"params": {"quietly": "yes"}}),
    ]
    for method, path, sent in attempts:
        answer = await alice.request(method, path, **sent)
        assert (answer.status_code, error_of(answer)) == (403, "forbidden"), answer.text
    refused = await service.admin.get("/v1/admin/audit", params={"action": "admin.refused"})
    assert [(e["actor"], e["target"], e["detail"]["act"]) for e in refused.json()["entries"]] == [
        ("alice", "bob", "set_block"),
        ("alice", None, "audit_log"),
        ("alice", None, "create_agent"),
        ("alice", "alice", "issue_key"),
        ("alice", "bob", "set_limits"),
    ]
    for method, path, sent in attempts:  # the owner still hears what is wrong
        answer = await service.admin.request(method, path, **sent)
        assert (answer.status_code, error_of(answer)) == (400, "invalid_argument"), answer.text


async def test_a_request_that_says_twice_who_is_asking_is_refused_and_reads_nothing(
    service: Service,
) -> None:
    """Two keys in one request spoke as the last: which one a client, or a proxy adding its
    own, meant is anyone's guess. An MCP connection named twice was the last to the guard
    and the first to the MCP SDK; a session named twice is refused alike."""
    alice_key, bob_key = await service.create_agent("alice"), await service.create_agent("bob")
    alice = service.client(alice_key)
    await alice.post("/v1/messages", json={"to": ["bob"], "body": "for bob's eyes"})
    bobs = [("Authorization", f"Bearer {bob_key}")]
    opened = (await service.client(bob_key).post("/v1/sessions", json={})).json()["session_id"]
    twice = [
        ("authorization", "/v1/inbox", [("Authorization", f"Bearer {alice_key}"), *bobs]),
        ("agentpost-session", "/v1/inbox", [*bobs, *[("Agentpost-Session", opened)] * 2]),
        ("mcp-session-id", "/mcp", [*bobs, ("Mcp-Session-Id", "one"), ("Mcp-Session-Id", "two")]),
    ]
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as raw:
        for header, path, sent in twice:
            answer = await raw.get(path, headers=sent)
            assert (answer.status_code, error_of(answer)) == (400, "invalid_argument"), header
            assert answer.json()["error"]["details"] == {"headers": [header]}
    unread = await service.client(bob_key).get("/v1/inbox", params={"peek": "true"})
    assert [m["body"] for m in unread.json()["messages"]] == ["for bob's eyes"]
    assert unread.json()["messages"][0]["state"] == "queued"


async def test_ten_failed_authentications_lock_the_address_out_across_a_restart(
    service: Service,
) -> None:
    intruder = service.client("ap_wrong")
    for _ in range(10):
        assert (await intruder.get("/v1/inbox")).status_code == 401
    locked = await service.admin.get("/v1/inbox")  # even a good key, from that address
    assert locked.status_code == 429
    assert error_of(locked) == "locked_out"
    assert int(locked.headers["Retry-After"]) > 800
    locks = sqlite3.connect(service.home / "agentpost.db").execute(
        "SELECT target, ip FROM audit WHERE action = 'auth.locked_out'"
    )
    assert locks.fetchall() == [("127.0.0.1", "127.0.0.1")]  # the owner learns of the lock
    await service.restart()
    assert (await service.admin.get("/v1/inbox")).status_code == 429


async def test_a_key_used_just_before_its_address_is_locked_out_is_refused_at_once(
    service: Service, tmp_path: Path
) -> None:
    """Its last request's answer is remembered (no read on SQLite within a third of
    `heartbeat_s`): the lock must still hold it off at once, set here or by another `serve`
    on the same database."""
    replica = Service(home=service.home, log=tmp_path / "replica.log", env=service.env)
    await replica.start()
    try:
        for here, failing in ((service, service), (service, replica)):
            owner = here.client(here.admin_key)
            for _ in range(2):  # the second is answered from what the first found
                assert (await owner.get("/v1/me")).status_code == 200
            intruder = failing.client("ap_wrong")
            for _ in range(10):
                assert (await intruder.get("/v1/inbox")).status_code == 401
            locked = await owner.get("/v1/me")
            assert (locked.status_code, error_of(locked)) == (429, "locked_out")
            lock = "DELETE FROM rate_windows WHERE key LIKE 'authlock:%'"
            with sqlite3.connect(service.home / "agentpost.db") as db:  # for the next round
                db.execute(lock)
    finally:
        await replica.aclose()


async def test_a_forwarded_for_header_neither_escapes_a_lockout_nor_names_the_address(
    service: Service,
) -> None:
    """Unless the owner names a trusted proxy, the address is the one the client connects from,
    whatever `X-Forwarded-For` a client writes."""
    intruder = service.client("ap_wrong")
    for n in range(10):
        forged = {"X-Forwarded-For": f"203.0.113.{n}"}
        assert (await intruder.get("/v1/inbox", headers=forged)).status_code == 401
    elsewhere = {"X-Forwarded-For": "198.51.100.7"}
    locked = await service.admin.get("/v1/inbox", headers=elsewhere)
    assert error_of(locked) == "locked_out"
    audited = sqlite3.connect(service.home / "agentpost.db").execute(
        "SELECT DISTINCT ip FROM audit WHERE action = 'auth.failed'"
    )
    assert [ip for (ip,) in audited] == ["127.0.0.1"]


async def test_behind_a_trusted_proxy_each_forwarded_address_is_counted_on_its_own(
    tmp_path: Path,
) -> None:
    env = {"AGENTPOST_TRUSTED_PROXIES": '["127.0.0.1"]'}
    async with running_service(tmp_path, env) as service:
        intruder = service.client("ap_wrong", **{"X-Forwarded-For": "203.0.113.9"})
        for _ in range(10):
            assert (await intruder.get("/v1/inbox")).status_code == 401
        owner_elsewhere = service.client(service.admin_key, **{"X-Forwarded-For": "198.51.100.7"})
        assert (await owner_elsewhere.get("/v1/inbox")).status_code == 200
        owner_there = service.client(service.admin_key, **{"X-Forwarded-For": "203.0.113.9"})
        assert error_of(await owner_there.get("/v1/inbox")) == "locked_out"


@pytest.mark.parametrize("turned_off", ["revoked", "disabled"])
async def test_a_daemon_retrying_a_turned_off_key_locks_nobody_out(
    service: Service, turned_off: str
) -> None:
    """A revoked key (or a disabled agent's) is no guess: finding one is as hard as finding a
    live key, and it grants nothing. Counted, a daemon left running with it locked out every
    other agent on its host."""
    created = (await service.admin.post("/v1/admin/agents", json={"name": "alice"})).json()
    alice = service.client(created["key"]["key"])
    assert (await alice.get("/v1/inbox")).status_code == 200
    if turned_off == "revoked":
        await service.admin.delete(f"/v1/admin/keys/{created['key']['id']}")
    else:
        await service.admin.post("/v1/admin/agents/alice/disable")
    for _ in range(15):
        answer = await alice.get("/v1/inbox")
        assert answer.status_code == 401
        error = answer.json()["error"]
        assert error["code"] == "unauthenticated"
        assert (
            error["details"]["reason"]
            == {"revoked": "key_revoked", "disabled": "agent_disabled"}[turned_off]
        )
    assert (await service.admin.get("/v1/inbox")).status_code == 200
    audited = (await service.admin.get("/v1/admin/audit", params={"action": "auth.failed"})).json()
    assert [e["target"] for e in audited["entries"]] == [created["key"]["id"]]


async def test_an_ipv6_client_gets_no_more_guesses_by_moving_within_its_64(
    tmp_path: Path,
) -> None:
    """One host is handed a whole /64: counted per address, it had unlimited guesses by
    taking a new address for every ten."""
    env = {"AGENTPOST_TRUSTED_PROXIES": '["127.0.0.1"]'}
    async with running_service(tmp_path, env) as service:
        for n in range(10):
            moved = service.client("ap_wrong", **{"X-Forwarded-For": f"2001:db8:1:2::{n + 1:x}"})
            assert (await moved.get("/v1/inbox")).status_code == 401
        same_64 = service.client(service.admin_key, **{"X-Forwarded-For": "2001:db8:1:2:ffff::9"})
        assert error_of(await same_64.get("/v1/inbox")) == "locked_out"
        next_64 = service.client(service.admin_key, **{"X-Forwarded-For": "2001:db8:1:3::1"})
        assert (await next_64.get("/v1/inbox")).status_code == 200
        locks = await next_64.get("/v1/admin/audit", params={"action": "auth.locked_out"})
        assert [(e["target"], e["ip"]) for e in locks.json()["entries"]] == [
            ("2001:db8:1:2::/64", "2001:db8:1:2::a")
        ]


async def test_failed_authentications_are_in_the_audit_log(tmp_path: Path) -> None:
    async with running_service(tmp_path, {"AGENTPOST_LOCKOUT_FAILURES": "50"}) as service:
        await service.client("ap_wrong").get("/v1/inbox")
        entries = (await service.admin.get("/v1/admin/audit")).json()["entries"]
        assert "auth.failed" in [e["action"] for e in entries]


async def test_first_start_writes_a_private_admin_key_and_says_how_to_connect(
    service: Service,
) -> None:
    path = service.home / "admin.key"
    assert path.stat().st_mode & 0o777 == 0o600
    assert service.admin_key.startswith("ap_")
    log = service.log.read_text()
    assert service.admin_key in log
    assert "claude mcp add --transport http agentpost" in log
    await service.restart()
    assert (service.home / "admin.key").read_text().strip() == service.admin_key
    assert log.count(service.admin_key) == service.log.read_text().count(service.admin_key)


async def test_a_configured_admin_key_is_used_and_no_file_is_written(tmp_path: Path) -> None:
    key = "ap_configured-admin-key-for-this-test-only-000000"
    async with running_service(tmp_path, {"AGENTPOST_ADMIN_KEY": key}) as service:
        assert (await service.client(key).get("/v1/admin/agents")).status_code == 200
        assert not (service.home / "admin.key").exists()


async def test_probing_for_taken_names_counts_toward_the_registration_limit(
    tmp_path: Path,
) -> None:
    """A refusal as `conflict` tells a stranger an agent by that name exists: uncounted, it let
    anyone list the agents by trying names."""
    env = {"AGENTPOST_OPEN_REGISTRATION": "true", "AGENTPOST_REGISTER_RATE_PER_HOUR": "2"}
    async with running_service(tmp_path, env) as service:
        await service.agent("alice")
        await service.agent("bob")
        stranger = service.client()
        for name in ("alice", "bob"):
            probe = await stranger.post("/v1/register", json={"name": name})
            assert error_of(probe) == "conflict"
        limited = await stranger.post("/v1/register", json={"name": "carol"})
        assert error_of(limited) == "rate_limited"
        assert int(limited.headers["Retry-After"]) > 3500


async def test_self_registration_is_closed_unless_the_owner_opens_it(service: Service) -> None:
    answer = await service.client().post("/v1/register", json={"name": "drifter"})
    assert answer.status_code == 403


async def test_a_self_registered_agents_mail_is_untrusted_until_vouched(tmp_path: Path) -> None:
    """While an agent the owner made speaks `verified` from the start, as the README says."""
    async with running_service(tmp_path, {"AGENTPOST_OPEN_REGISTRATION": "true"}) as service:
        bob = await service.agent("bob")
        alice = await service.agent("alice")
        await alice.post("/v1/messages", json={"to": "bob", "body": "from a made agent"})
        assert [m["trust"] for m in (await bob.get("/v1/inbox")).json()["messages"]] == ["verified"]
        registered = await service.client().post(
            "/v1/register", json={"name": "drifter", "description": "a stranger"}
        )
        assert registered.status_code == 201, registered.text
        drifter = service.client(registered.json()["key"])
        await drifter.post("/v1/messages", json={"to": "bob", "body": "hello"})
        assert [m["trust"] for m in (await bob.get("/v1/inbox")).json()["messages"]] == [
            "untrusted"
        ]
        assert (await service.admin.post("/v1/admin/agents/drifter/vouch")).status_code == 200
        await drifter.post("/v1/messages", json={"to": "bob", "body": "again"})
        assert [m["trust"] for m in (await bob.get("/v1/inbox")).json()["messages"]] == ["verified"]


async def test_a_revoked_admin_key_file_is_named_with_the_way_to_a_new_one(
    service: Service,
) -> None:
    """The log said "was revoked; set another", though removing admin.key is what makes a
    new one at the next start."""
    issued = await service.admin.post("/v1/admin/agents/owner/keys", json={"admin": True})
    assert issued.status_code == 201, issued.text
    keys = (await service.admin.get("/v1/admin/keys", params={"agent": "owner"})).json()["keys"]
    [first] = [k["id"] for k in keys if k["id"] != issued.json()["id"]]
    assert (await service.admin.delete(f"/v1/admin/keys/{first}")).status_code == 200
    await service.restart()
    path = service.home / "admin.key"
    assert (
        f"the admin key in {path} ({first}) was revoked; remove that file and restart to have "
        "a new one made" in service.log.read_text()
    )
    path.unlink()
    await service.restart()
    assert (await service.admin.get("/v1/admin/agents")).status_code == 200
