"""Keys: a bearer secret stands for one agent; lockout after failures; sessions over HTTP;
the owner's admin key; issuing, revoking and self-registration.

Authentication failures are the one refusal that writes: each leaves an audit row and counts
toward its address's lockout. Every other refusal changes nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anyio
import pytest

from account_helpers import ADDRESS, ADMIN_SECRET, keyed, owner
from agentpost.domain.errors import AgentpostError, ErrorCode
from agentpost.domain.models import Caller, Trust
from agentpost.services import PostOffice
from agentpost.services.keys import default_session_id
from agentpost.store import database
from backends import FakeClock, OpenOffice, refused_without_change, session_caller, snapshot

pytestmark = pytest.mark.anyio

UNKNOWN = "ap_" + "x" * 43
"""Shaped like a key; no key of the post office."""
MINUTE = 60.0


async def fail(office: PostOffice, times: int = 1, *, ip: str = ADDRESS) -> None:
    for _ in range(times):
        with pytest.raises(AgentpostError) as caught:
            await office.keys.authenticate(UNKNOWN, ip=ip)
        assert caught.value.code is ErrorCode.UNAUTHENTICATED


async def failures_audited(office: PostOffice) -> list[tuple[str | None, str | None, str]]:
    entries = await office.admin.audit_log(await owner(office), action="auth.failed")
    return [(e.target, e.ip, e.detail["reason"]) for e in entries]


# -- who a key stands for ------------------------------------------------------------------------


async def test_an_issued_key_authenticates_as_its_agent_in_a_session_of_its_own(
    office: PostOffice,
) -> None:
    admin = await owner(office)
    _, issued = await office.admin.create_agent(admin, "alice", project="shop")
    caller = await office.keys.authenticate(issued.key, ip=ADDRESS)
    assert caller == Caller(
        "alice",
        default_session_id(issued.id),
        Trust.VERIFIED,
        admin=False,
        key_id=issued.id,
        ip=ADDRESS,
    )
    session = await office.presence.session(caller.session_id or "")
    assert (session.agent, session.transport, session.host, session.pid, session.project) == (
        "alice",
        "http",
        ADDRESS,
        None,
        "shop",
    )
    again = await office.keys.authenticate(issued.key, ip="198.51.100.1")
    assert again.session_id == caller.session_id  # one session per key unless one is named


async def test_the_owners_admin_key_is_an_admin_caller_named_owner(office: PostOffice) -> None:
    admin = await owner(office)
    assert (admin.agent, admin.admin, admin.trust) == ("owner", True, Trust.VERIFIED)


async def test_issued_keys_are_ap_and_32_random_bytes_and_stored_only_as_a_hash(
    office: PostOffice,
) -> None:
    admin = await owner(office)
    _, first = await office.admin.create_agent(admin, "alice")
    second = await office.keys.issue(admin, "alice", label="laptop")
    for issued in (first, second):
        assert issued.key.startswith("ap_")
        assert len(issued.key) == 3 + 43  # 32 bytes, URL-safe base64 without padding
    assert first.key != second.key
    everything = repr(await snapshot(office.store))
    assert first.key not in everything
    assert second.key not in everything
    assert hashlib.sha256(first.key.encode()).hexdigest() in everything


@pytest.mark.parametrize(
    ("secret", "reason"),
    [
        (UNKNOWN, "unknown key"),
        ("ap_short", "malformed key"),
        ("ap_" + "x" * 20 + " with a space", "malformed key"),
        ("ap_" + "é" * 43, "malformed key"),
        ("x" * 600, "malformed key"),
    ],
)
async def test_an_unknown_or_malformed_key_is_unauthenticated_and_audited(
    office: PostOffice, secret: str, reason: str
) -> None:
    await owner(office)
    with pytest.raises(AgentpostError) as caught:
        await office.keys.authenticate(secret, ip=ADDRESS)
    assert caught.value.code is ErrorCode.UNAUTHENTICATED
    assert await failures_audited(office) == [(None, ADDRESS, reason)]


@pytest.mark.parametrize("secret", [None, ""])
async def test_a_request_without_a_key_is_refused_without_counting(
    office: PostOffice, secret: str | None
) -> None:
    """MCP clients probe without a key to learn how to authenticate: that is no guess."""
    await refused_without_change(
        office, ErrorCode.UNAUTHENTICATED, office.keys.authenticate(secret, ip=ADDRESS)
    )


async def test_a_revoked_key_is_refused_on_the_next_request(office: PostOffice) -> None:
    admin = await owner(office)
    _, issued = await office.admin.create_agent(admin, "alice")
    spare = await office.keys.issue(admin, "alice")
    await office.keys.authenticate(issued.key, ip=ADDRESS)
    revoked = await office.keys.revoke(admin, issued.id)
    assert revoked.revoked_at is not None
    with pytest.raises(AgentpostError) as caught:
        await office.keys.authenticate(issued.key, ip=ADDRESS)
    assert caught.value.code is ErrorCode.UNAUTHENTICATED
    assert await failures_audited(office) == [(issued.id, ADDRESS, "revoked key")]
    assert (await office.keys.authenticate(spare.key, ip=ADDRESS)).agent == "alice"


async def test_a_disabled_agents_keys_are_refused_until_it_is_enabled(office: PostOffice) -> None:
    admin = await owner(office)
    _, issued = await office.admin.create_agent(admin, "alice")
    await office.admin.disable_agent(admin, "alice")
    with pytest.raises(AgentpostError) as caught:
        await office.keys.authenticate(issued.key, ip=ADDRESS)
    assert caught.value.code is ErrorCode.UNAUTHENTICATED
    assert await failures_audited(office) == [(issued.id, ADDRESS, "agent disabled")]
    await office.admin.enable_agent(admin, "alice")
    assert (await office.keys.authenticate(issued.key, ip=ADDRESS)).agent == "alice"


async def test_a_turned_off_key_counts_toward_no_lockout_and_is_audited_once_a_window(
    office: PostOffice, clock: FakeClock
) -> None:
    admin = await owner(office)
    _, issued = await office.admin.create_agent(admin, "alice")
    await office.keys.revoke(admin, issued.id)
    for _ in range(20):
        with pytest.raises(AgentpostError) as caught:
            await office.keys.authenticate(issued.key, ip=ADDRESS)
        assert caught.value.details == {"reason": "key_revoked"}
    assert (await office.keys.authenticate(ADMIN_SECRET, ip=ADDRESS)).agent == "owner"
    assert len(await failures_audited(office)) == 1
    clock.advance(office.settings.lockout_s)
    with pytest.raises(AgentpostError):
        await office.keys.authenticate(issued.key, ip=ADDRESS)
    assert len(await failures_audited(office)) == 2


async def test_the_callers_trust_is_read_afresh_on_every_request(
    open_office: OpenOffice,
) -> None:
    office = await open_office(open_registration=True)
    issued = await office.keys.self_register("drifter", ip=ADDRESS)
    assert (await office.keys.authenticate(issued.key, ip=ADDRESS)).trust is Trust.UNTRUSTED
    await office.admin.vouch(await owner(office), "drifter")
    assert (await office.keys.authenticate(issued.key, ip=ADDRESS)).trust is Trust.VERIFIED


def counted_reads(office: PostOffice, monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """How many reads authentication has made of the store since now (`glance`, its read)."""
    reads = 0
    glance = office.store.glance

    async def counted(fn: Any) -> Any:
        nonlocal reads
        reads += 1
        return await glance(fn)

    monkeypatch.setattr(office.store, "glance", counted)
    return lambda: reads


async def test_a_request_reads_its_key_again_once_anything_but_a_send_was_written(
    office: PostOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite what a request found holds while only sends are written (no other process
    wrote either): the next request of the key needs no read. PostgreSQL reads every time."""
    # The indexer's write a second after the send would keep the writer busy, and a busy
    # writer's "nothing changed" cannot be told at once: the next test covers that write.
    monkeypatch.setattr(database, "INDEX_AFTER_S", 3600.0)
    alice, secret = await keyed(office, "alice")
    await keyed(office, "bob")
    reads = counted_reads(office, monkeypatch)
    first = await office.keys.authenticate(secret, ip=ADDRESS)
    assert reads() == 1
    await office.mailbox.send(alice, "bob", "a send leaves every account as it was")
    again = await office.keys.authenticate(secret, ip=ADDRESS)
    assert again == first
    assert reads() == (1 if office.store.is_sqlite else 2)
    await office.presence.update_profile(alice, objective="a write to a session")
    await office.keys.authenticate(secret, ip=ADDRESS)
    assert reads() == (2 if office.store.is_sqlite else 3)


async def settled_accounts_version(office: PostOffice) -> int:
    """The version once the writer thread has finished what it was doing (None meanwhile)."""
    with anyio.fail_after(5):
        while (version := office.store.accounts_version()) is None:  # noqa: ASYNC110 - a thread's state
            await asyncio.sleep(0.01)
    return version


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_the_background_writes_leave_what_requests_found_standing(
    office: PostOffice,
) -> None:
    """The full-text indexer after a send and the sweeper's looks for mail and tasks falling
    due change no account: a key remembered before them is still good after."""
    alice, _ = await keyed(office, "alice")
    await keyed(office, "bob")
    await office.mailbox.send(alice, "bob", "words for the indexer")
    before = await settled_accounts_version(office)
    await office.store.index_for_search()
    await office.mailbox.expire_due()
    await office.tasks.tell_overdue()
    assert await settled_accounts_version(office) == before
    await office.presence.update_profile(alice, objective="a write to a session")
    assert await settled_accounts_version(office) != before


async def test_a_key_records_when_it_was_last_used(office: PostOffice, clock: FakeClock) -> None:
    admin = await owner(office)
    _, issued = await office.admin.create_agent(admin, "alice")
    (fresh,) = await office.keys.list_keys(admin, "alice")
    assert fresh.last_used_at is None
    clock.advance(MINUTE)
    await office.keys.authenticate(issued.key, ip=ADDRESS)
    (used,) = await office.keys.list_keys(admin, "alice")
    assert used.last_used_at == clock.now


# -- lockout -------------------------------------------------------------------------------------


async def test_ten_failures_lock_the_ip_out_for_fifteen_minutes(
    office: PostOffice, clock: FakeClock
) -> None:
    assert (office.settings.lockout_failures, office.settings.lockout_s) == (10, 900)
    _, secret = await keyed(office, "alice")
    await fail(office, 9)
    await office.keys.authenticate(secret, ip=ADDRESS)  # nine are not enough
    await fail(office)
    locked = await refused_without_change(
        office, ErrorCode.LOCKED_OUT, office.keys.authenticate(secret, ip=ADDRESS)
    )
    assert locked.retry_after_s == 900  # even a good key, from that address
    assert (await office.keys.authenticate(secret, ip="198.51.100.1")).agent == "alice"
    clock.advance(899)
    locked = await refused_without_change(
        office, ErrorCode.LOCKED_OUT, office.keys.authenticate(secret, ip=ADDRESS)
    )
    assert locked.retry_after_s == 1
    clock.advance(1)
    assert (await office.keys.authenticate(secret, ip=ADDRESS)).agent == "alice"


async def test_a_key_remembered_from_its_last_request_is_refused_at_once_when_locked_out(
    office: PostOffice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key's next request within a third of `heartbeat_s` needs no read on SQLite: the lock
    of its address must still hold it off from the failure that set it, not once the caller
    remembered falls due."""
    monkeypatch.setattr(database, "INDEX_AFTER_S", 3600.0)  # a busy writer could not tell
    _, secret = await keyed(office, "alice")
    reads = counted_reads(office, monkeypatch)
    first = await office.keys.authenticate(secret, ip=ADDRESS)
    assert await office.keys.authenticate(secret, ip=ADDRESS) == first
    remembered = reads() == 1
    assert remembered is office.store.is_sqlite  # PostgreSQL reads every time
    await fail(office, office.settings.lockout_failures)
    locked = await refused_without_change(
        office, ErrorCode.LOCKED_OUT, office.keys.authenticate(secret, ip=ADDRESS)
    )
    assert locked.retry_after_s == office.settings.lockout_s
    assert (await office.keys.authenticate(secret, ip="198.51.100.1")).agent == "alice"


async def test_ten_failures_within_fifteen_minutes_lock_wherever_the_clock_stands(
    office: PostOffice, clock: FakeClock
) -> None:
    """Counted over a sliding window, not in windows fixed to the clock."""
    _, secret = await keyed(office, "alice")
    clock.advance(800)
    await fail(office, 5)
    clock.advance(150)  # past a multiple of fifteen minutes since the epoch
    await fail(office, 5)
    await refused_without_change(
        office, ErrorCode.LOCKED_OUT, office.keys.authenticate(secret, ip=ADDRESS)
    )


async def test_no_more_guesses_are_answered_than_the_count_wherever_they_fall(
    office: PostOffice, clock: FakeClock
) -> None:
    """Counted from a run's first failure, one early failure let 9 + 9 guesses through
    within fifteen minutes: its run ended and the count began again."""
    _, secret = await keyed(office, "alice")
    await fail(office)
    clock.advance(890)
    await fail(office, 8)
    clock.advance(11)  # the first failure is out of the window, the other eight are in it
    await fail(office, 2)  # the tenth within fifteen minutes
    locked = await refused_without_change(
        office, ErrorCode.LOCKED_OUT, office.keys.authenticate(UNKNOWN, ip=ADDRESS)
    )
    assert locked.retry_after_s == 900
    await refused_without_change(
        office, ErrorCode.LOCKED_OUT, office.keys.authenticate(secret, ip=ADDRESS)
    )


async def test_guesses_in_flight_together_are_answered_no_more_than_the_count(
    office: PostOffice,
) -> None:
    """Each looked for the lock before any failure was counted; past the tenth, the rest
    are answered as locked out, not as wrong keys."""

    async def guess() -> ErrorCode:
        with pytest.raises(AgentpostError) as caught:
            await office.keys.authenticate(UNKNOWN, ip=ADDRESS)
        return caught.value.code

    codes = await asyncio.gather(*(guess() for _ in range(30)))
    assert (codes.count(ErrorCode.UNAUTHENTICATED), codes.count(ErrorCode.LOCKED_OUT)) == (10, 20)


async def test_an_address_counts_once_however_it_is_spelt(office: PostOffice) -> None:
    _, secret = await keyed(office, "alice")
    await fail(office, 5, ip="2001:DB8::1")
    await fail(office, 5, ip="2001:0db8:0:0::1")
    await refused_without_change(
        office, ErrorCode.LOCKED_OUT, office.keys.authenticate(secret, ip="2001:db8::1")
    )


async def test_an_ipv4_address_counts_once_when_it_comes_as_ipv6(office: PostOffice) -> None:
    """A dual-stack socket shows an IPv4 client as `::ffff:192.0.2.1`, a proxy forwards it as
    `192.0.2.1`: one client reaching the service both ways had twice the guesses."""
    _, secret = await keyed(office, "alice")
    await fail(office, 5, ip="::ffff:192.0.2.1")
    await fail(office, 5, ip="192.0.2.1")
    await refused_without_change(
        office, ErrorCode.LOCKED_OUT, office.keys.authenticate(secret, ip="::FFFF:c000:201")
    )


async def test_an_ipv6_address_counts_with_the_rest_of_its_64(office: PostOffice) -> None:
    """One host holds a whole /64; the audit still names each address as it came."""
    _, secret = await keyed(office, "alice")
    for n in range(10):
        await fail(office, ip=f"2001:db8:0:1::{n + 1:x}")
    await refused_without_change(
        office, ErrorCode.LOCKED_OUT, office.keys.authenticate(secret, ip="2001:db8:0:1:ab::1")
    )
    assert (await office.keys.authenticate(secret, ip="2001:db8:0:2::1")).agent == "alice"
    assert {ip for _, ip, _ in await failures_audited(office)} == {
        f"2001:db8:0:1::{n + 1:x}" for n in range(10)
    }


async def test_registrations_from_one_ipv6_64_count_together(open_office: OpenOffice) -> None:
    office = await open_office(open_registration=True, register_rate_per_hour=2)
    await office.keys.self_register("first", ip="2001:db8:0:1::1")
    await office.keys.self_register("second", ip="2001:db8:0:1::2")
    await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.keys.self_register("third", ip="2001:db8:0:1::3")
    )
    await office.keys.self_register("third", ip="2001:db8:0:2::1")


async def test_the_audit_spells_an_address_as_the_lockout_counts_it(
    open_office: OpenOffice,
) -> None:
    """A failed authentication and a self-registration from `2001:DB8::1` were audited as
    the proxy spelt them, while the sends of the same client said `2001:db8::1`: the owner
    could not tell that one address did all three."""
    office = await open_office(open_registration=True)
    with pytest.raises(AgentpostError):
        await office.keys.authenticate(UNKNOWN, ip="2001:DB8::1")
    issued = await office.keys.self_register("drifter", ip="2001:0db8:0:0::1")
    caller = await office.keys.authenticate(issued.key, ip="2001:DB8:0::1")
    entries = await office.admin.audit_log(await owner(office))
    spelt = {e.action: e.ip for e in entries if e.action in ("auth.failed", "agent.registered")}
    assert spelt == {"auth.failed": caller.ip, "agent.registered": caller.ip}
    assert caller.ip == "2001:db8::1"


async def test_failures_further_apart_than_fifteen_minutes_do_not_lock(
    office: PostOffice, clock: FakeClock
) -> None:
    _, secret = await keyed(office, "alice")
    await fail(office, 9)
    clock.advance(901)
    await fail(office, 9)
    assert (await office.keys.authenticate(secret, ip=ADDRESS)).agent == "alice"


async def test_a_good_key_does_not_wipe_the_failures_counted_before_it(
    office: PostOffice,
) -> None:
    """Else one valid key would let its holder guess at others without end."""
    _, secret = await keyed(office, "alice")
    await fail(office, 9)
    await office.keys.authenticate(secret, ip=ADDRESS)
    await fail(office)
    await refused_without_change(
        office, ErrorCode.LOCKED_OUT, office.keys.authenticate(secret, ip=ADDRESS)
    )


async def test_an_address_longer_than_the_audit_holds_still_counts_toward_its_lockout(
    office: PostOffice,
) -> None:
    """A proxy may pass any address on; on PostgreSQL an over-long one failed the audit row,
    and with it the count, so that address was never locked out."""
    _, secret = await keyed(office, "alice")
    long_ip = "2001:db8::" + "f" * 200
    await fail(office, 10, ip=long_ip)
    await refused_without_change(
        office, ErrorCode.LOCKED_OUT, office.keys.authenticate(secret, ip=long_ip)
    )
    assert [ip for _, ip, _ in await failures_audited(office)] == [long_ip[:64]] * 10


async def test_after_a_lockout_the_count_starts_again(office: PostOffice, clock: FakeClock) -> None:
    _, secret = await keyed(office, "alice")
    await fail(office, 10)
    clock.advance(900)
    await fail(office, 9)
    assert (await office.keys.authenticate(secret, ip=ADDRESS)).agent == "alice"


async def test_lockout_survives_a_restart(open_office: OpenOffice) -> None:
    first = await open_office()
    _, secret = await keyed(first, "alice")
    await fail(first, 10)
    await first.aclose()
    second = await open_office()  # the same database, a new process's view of it
    await refused_without_change(
        second, ErrorCode.LOCKED_OUT, second.keys.authenticate(secret, ip=ADDRESS)
    )


async def test_failures_and_lock_length_are_configurable(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    office = await open_office(lockout_failures=2, lockout_s=60)
    _, secret = await keyed(office, "alice")
    await fail(office, 2)
    locked = await refused_without_change(
        office, ErrorCode.LOCKED_OUT, office.keys.authenticate(secret, ip=ADDRESS)
    )
    assert locked.retry_after_s == 60
    clock.advance(60)
    assert (await office.keys.authenticate(secret, ip=ADDRESS)).agent == "alice"


async def test_callers_without_an_address_are_counted_together(office: PostOffice) -> None:
    _, secret = await keyed(office, "alice")
    for _ in range(10):
        with pytest.raises(AgentpostError):
            await office.keys.authenticate(UNKNOWN, ip=None)
    await refused_without_change(
        office, ErrorCode.LOCKED_OUT, office.keys.authenticate(secret, ip=None)
    )
    assert (await office.keys.authenticate(secret, ip=ADDRESS)).agent == "alice"


async def test_the_sweep_forgets_failures_and_locks_that_no_longer_count(
    office: PostOffice, clock: FakeClock
) -> None:
    await fail(office, 10)
    await fail(office, 3, ip="198.51.100.1")
    clock.advance(900)
    await fail(office, 1, ip="198.51.100.2")  # a run that still counts
    await office.mailbox.sweep()
    windows = (await snapshot(office.store))["rate_windows"]
    [kept] = [row[0] for row in windows if row[0].startswith("auth")]
    assert kept.startswith("authfail:198.51.100.2|")


async def test_the_sweep_forgets_registration_and_send_windows_that_ended(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """A window per address that ever registered would pile up for good."""
    office = await open_office(open_registration=True)
    await office.keys.self_register("first", ip=ADDRESS)
    await office.keys.self_register("second", ip="198.51.100.1")
    alice, _ = await keyed(office, "alice")
    await office.mailbox.send(alice, "alice", "note to self")
    clock.advance(3600)
    await office.keys.self_register("third", ip="198.51.100.2")  # a window that still counts
    await office.mailbox.sweep()
    windows = [row[0] for row in (await snapshot(office.store))["rate_windows"]]
    assert sorted(key.partition("|")[0] for key in windows if not key.startswith("auth")) == [
        "register:*",  # all addresses together: the third still counts there
        "register:198.51.100.2",
    ]


# -- sessions over HTTP --------------------------------------------------------------------------


async def test_requests_heartbeat_the_session_at_most_every_third_of_heartbeat_s(
    office: PostOffice, clock: FakeClock
) -> None:
    """A request costs a read; a write only when the heartbeat is due (15 s / 3)."""
    alice, secret = await keyed(office, "alice")
    clock.advance(4.9)
    before = await snapshot(office.store)
    await office.keys.authenticate(secret, ip=ADDRESS)
    assert await snapshot(office.store) == before
    clock.advance(0.1)
    await office.keys.authenticate(secret, ip=ADDRESS)
    session = await office.presence.session(alice.session_id or "")
    assert session.heartbeat_at == clock.now


async def test_a_keys_session_goes_offline_without_requests_and_comes_back_with_one(
    office: PostOffice, clock: FakeClock
) -> None:
    _, secret = await keyed(office, "alice")
    clock.advance(office.settings.offline_after_s)
    assert [p.online for p in await office.presence.who(include_offline=True)] == [False, False]
    await office.keys.authenticate(secret, ip=ADDRESS)
    assert [p.name for p in await office.presence.who()] == ["alice"]


async def test_an_http_session_carries_where_the_agent_works(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, secret = await keyed(office, "alice")
    clock.advance(1)  # `who` shows the freshest session
    session = await office.presence.open_http_session(
        alice,
        host="build-7",
        project="shop",
        worktree="/src/shop",
        branch="main",
        objective="release",
    )
    assert session.id != alice.session_id
    assert (session.transport, session.host, session.pid) == ("http", "build-7", None)
    named = await office.keys.authenticate(secret, ip=ADDRESS, session=session.id)
    assert named.session_id == session.id
    (present,) = [p for p in await office.presence.who() if p.name == "alice"]
    assert (present.project, present.branch, present.objective) == ("shop", "main", "release")
    assert (await office.directory.me(alice)).project == "shop"  # as a local session's does


async def test_a_named_session_must_be_a_live_session_of_the_same_agent(
    office: PostOffice,
) -> None:
    alice, _ = await keyed(office, "alice")
    _, bob_secret = await keyed(office, "bob")
    session = await office.presence.open_http_session(alice, host="laptop")
    for name in (session.id, "s_unknown"):
        await refused_without_change(
            office,
            ErrorCode.NOT_FOUND,
            office.keys.authenticate(bob_secret, ip=ADDRESS, session=name),
        )
    await office.presence.end_session(session.id)
    _, alice_secret = await keyed(office, "alice-2")
    await refused_without_change(
        office,
        ErrorCode.NOT_FOUND,
        office.keys.authenticate(alice_secret, ip=ADDRESS, session=session.id),
    )


async def test_a_bound_connection_speaks_for_its_session_until_that_session_ends(
    office: PostOffice,
) -> None:
    alice, secret = await keyed(office, "alice")
    session = await office.presence.open_http_session(alice, host="laptop")
    office.keys.bind_connection("conn-1", replace(alice, session_id=session.id))
    on_it = await office.keys.authenticate(secret, ip=ADDRESS, connection="conn-1")
    elsewhere = await office.keys.authenticate(secret, ip=ADDRESS, connection="conn-2")
    assert (on_it.session_id, elsewhere.session_id) == (session.id, alice.session_id)
    await office.presence.end_session(session.id)
    after = await office.keys.authenticate(secret, ip=ADDRESS, connection="conn-1")
    assert after.session_id == alice.session_id  # back to the key's own, not refused


async def test_a_bound_connection_gives_another_agents_key_nothing(office: PostOffice) -> None:
    """Identity never comes from the connection: bob presenting alice's connection is bob, in
    his own session, and alice's binding survives him."""
    alice, alice_secret = await keyed(office, "alice")
    bob, bob_secret = await keyed(office, "bob")
    session = await office.presence.open_http_session(alice, host="laptop")
    office.keys.bind_connection("conn-1", replace(alice, session_id=session.id))
    as_bob = await office.keys.authenticate(bob_secret, ip=ADDRESS, connection="conn-1")
    assert (as_bob.agent, as_bob.session_id) == ("bob", bob.session_id)
    assert office.keys.release_connection("conn-1", bob) is None
    as_alice = await office.keys.authenticate(alice_secret, ip=ADDRESS, connection="conn-1")
    assert as_alice.session_id == session.id


async def test_a_look_that_saw_an_ended_session_keeps_a_binding_made_meanwhile(
    office: PostOffice,
) -> None:
    alice, secret = await keyed(office, "alice")
    old = await office.presence.open_http_session(alice, host="laptop")
    office.keys.bind_connection("conn-1", replace(alice, session_id=old.id))
    await office.presence.end_session(old.id)
    new = await office.presence.open_http_session(alice, host="laptop")
    in_flight = asyncio.ensure_future(
        office.keys.authenticate(secret, ip=ADDRESS, connection="conn-1")
    )
    await asyncio.sleep(0)  # it read the binding to the ended session and awaits its look
    office.keys.bind_connection("conn-1", replace(alice, session_id=new.id))
    await in_flight
    after = await office.keys.authenticate(secret, ip=ADDRESS, connection="conn-1")
    assert after.session_id == new.id


async def test_another_agent_cannot_bind_a_connection_that_is_bound(office: PostOffice) -> None:
    alice, secret = await keyed(office, "alice")
    bob, _ = await keyed(office, "bob")
    session = await office.presence.open_http_session(alice, host="laptop")
    office.keys.bind_connection("conn-1", replace(alice, session_id=session.id))
    bobs = await office.presence.open_http_session(bob, host="laptop")
    assert office.keys.may_bind("conn-1", bob) is False
    with pytest.raises(AgentpostError) as refused:
        office.keys.bind_connection("conn-1", replace(bob, session_id=bobs.id))
    assert refused.value.code is ErrorCode.FORBIDDEN
    caller = await office.keys.authenticate(secret, ip=ADDRESS, connection="conn-1")
    assert caller.session_id == session.id


async def test_a_named_session_wins_over_the_connections(office: PostOffice) -> None:
    alice, secret = await keyed(office, "alice")
    bound = await office.presence.open_http_session(alice, host="laptop")
    named = await office.presence.open_http_session(alice, host="laptop")
    office.keys.bind_connection("conn-1", replace(alice, session_id=bound.id))
    caller = await office.keys.authenticate(
        secret, ip=ADDRESS, session=named.id, connection="conn-1"
    )
    assert caller.session_id == named.id


async def test_releasing_a_connection_returns_its_session_once(office: PostOffice) -> None:
    alice, secret = await keyed(office, "alice")
    session = await office.presence.open_http_session(alice, host="laptop")
    office.keys.bind_connection("conn-1", replace(alice, session_id=session.id))
    assert office.keys.release_connection("conn-1", alice) == session.id
    assert office.keys.release_connection("conn-1", alice) is None
    caller = await office.keys.authenticate(secret, ip=ADDRESS, connection="conn-1")
    assert caller.session_id == alice.session_id


async def test_a_key_cannot_speak_for_its_agents_local_session(office: PostOffice) -> None:
    """A local session may do what only a local session may (force leadership): a key that
    named one would borrow that."""
    _, secret = await keyed(office, "alice")
    local = await session_caller(office, "alice")
    await refused_without_change(
        office,
        ErrorCode.NOT_FOUND,
        office.keys.authenticate(secret, ip=ADDRESS, session=local.session_id),
    )


async def test_an_ended_session_of_alice_is_not_found_for_her_either(office: PostOffice) -> None:
    admin = await owner(office)
    alice, _ = await keyed(office, "alice")
    spare = await office.keys.issue(admin, "alice")
    session = await office.presence.open_http_session(alice, host="laptop")
    await office.presence.end_session(session.id)
    await refused_without_change(
        office,
        ErrorCode.NOT_FOUND,
        office.keys.authenticate(spare.key, ip=ADDRESS, session=session.id),
    )


async def test_a_keys_own_session_comes_back_after_the_agent_is_enabled_again(
    office: PostOffice,
) -> None:
    admin = await owner(office)
    alice, secret = await keyed(office, "alice")
    await office.admin.disable_agent(admin, "alice")
    assert (await office.presence.session(alice.session_id or "")).ended_at is not None
    await office.admin.enable_agent(admin, "alice")
    again = await office.keys.authenticate(secret, ip=ADDRESS)
    assert again.session_id == alice.session_id
    assert (await office.presence.session(again.session_id or "")).ended_at is None


async def test_an_agent_heartbeats_and_ends_only_sessions_of_its_own(
    office: PostOffice, clock: FakeClock
) -> None:
    alice, _ = await keyed(office, "alice")
    bob, _ = await keyed(office, "bob")
    session = await office.presence.open_http_session(alice, host="laptop")
    clock.advance(30)
    await office.presence.heartbeat_of(alice, session.id)
    assert (await office.presence.session(session.id)).heartbeat_at == clock.now
    for call in (
        office.presence.heartbeat_of(bob, session.id),
        office.presence.end_session_of(bob, session.id),
        office.presence.heartbeat_of(alice, "s_unknown"),
    ):
        await refused_without_change(office, ErrorCode.NOT_FOUND, call)
    await office.presence.end_session_of(alice, session.id)
    ended = await office.presence.session(session.id)
    assert ended.ended_at == clock.now
    await office.presence.end_session_of(alice, session.id)  # again: nothing more to do
    await refused_without_change(
        office, ErrorCode.NOT_FOUND, office.presence.heartbeat_of(alice, session.id)
    )


@pytest.mark.parametrize(
    ("context", "code"),
    [
        ({"host": "h" * 256}, ErrorCode.TOO_LARGE),
        ({"host": "laptop", "objective": "o" * 2001}, ErrorCode.TOO_LARGE),
        ({"host": "laptop", "project": "Not A Project"}, ErrorCode.INVALID_ARGUMENT),
    ],
)
async def test_an_http_session_with_bad_context_is_refused(
    office: PostOffice, context: dict[str, str], code: ErrorCode
) -> None:
    alice, _ = await keyed(office, "alice")
    await refused_without_change(office, code, office.presence.open_http_session(alice, **context))


# -- the owner's key -------------------------------------------------------------------------------


async def test_installing_the_admin_key_is_idempotent(office: PostOffice) -> None:
    first = await office.keys.install_admin_key(ADMIN_SECRET)
    before = await snapshot(office.store)
    assert await office.keys.install_admin_key(ADMIN_SECRET) == first
    assert await snapshot(office.store) == before
    assert (first.agent, first.admin, first.revoked_at) == ("owner", True, None)


async def test_a_changed_admin_key_is_added_and_the_old_one_works_until_revoked(
    office: PostOffice,
) -> None:
    """What docs/SERVICE.md tells an owner rotating AGENTPOST_ADMIN_KEY."""
    old = await office.keys.install_admin_key(ADMIN_SECRET)
    new_secret = "rotated-admin-secret-0123456789"
    await office.keys.install_admin_key(new_secret)
    admin = await office.keys.authenticate(new_secret, ip=ADDRESS)
    assert (await office.keys.authenticate(ADMIN_SECRET, ip=ADDRESS)).admin
    await office.keys.revoke(admin, old.id)
    with pytest.raises(AgentpostError, match="revoked"):
        await office.keys.authenticate(ADMIN_SECRET, ip=ADDRESS)


@pytest.mark.parametrize("secret", ["short", "x" * 15, "sixteen chars ok"])
async def test_an_admin_key_under_sixteen_visible_characters_is_refused(
    office: PostOffice, secret: str
) -> None:
    await refused_without_change(
        office, ErrorCode.INVALID_ARGUMENT, office.keys.install_admin_key(secret)
    )


async def test_a_revoked_admin_key_stays_revoked_when_installed_again(office: PostOffice) -> None:
    """Revocation is for good: a leaked key must not come back with the next restart."""
    configured = await office.keys.install_admin_key(ADMIN_SECRET)
    admin = await office.keys.authenticate(ADMIN_SECRET, ip=ADDRESS)
    second = await office.keys.issue(admin, "owner", admin_key=True)
    await office.keys.revoke(admin, configured.id)
    again = await office.keys.install_admin_key(ADMIN_SECRET)
    assert (again.id, again.revoked_at is not None) == (configured.id, True)
    with pytest.raises(AgentpostError):
        await office.keys.authenticate(ADMIN_SECRET, ip=ADDRESS)
    assert (await office.keys.authenticate(second.key, ip=ADDRESS)).admin


async def test_an_agents_key_cannot_be_installed_as_the_admin_key(office: PostOffice) -> None:
    _, secret = await keyed(office, "alice")
    await refused_without_change(office, ErrorCode.CONFLICT, office.keys.install_admin_key(secret))


# -- issuing and revoking ------------------------------------------------------------------------


async def test_an_agent_may_hold_several_keys_and_listing_never_shows_a_secret(
    office: PostOffice, clock: FakeClock
) -> None:
    admin = await owner(office)
    _, first = await office.admin.create_agent(admin, "alice")
    clock.advance(1)
    laptop = await office.keys.issue(admin, "alice", label="laptop")
    for issued in (first, laptop):
        assert (await office.keys.authenticate(issued.key, ip=ADDRESS)).agent == "alice"
    listed = await office.keys.list_keys(admin, "alice")
    assert [(k.id, k.label) for k in listed] == [(first.id, "first key"), (laptop.id, "laptop")]
    assert set(listed[0].to_dict()) == {
        "id",
        "agent",
        "label",
        "admin",
        "created_at",
        "revoked_at",
        "last_used_at",
    }
    everyone = await office.keys.list_keys(admin)
    assert {k.agent for k in everyone} == {"owner", "alice"}


async def test_admin_keys_belong_to_the_owner(office: PostOffice) -> None:
    admin = await owner(office)
    await keyed(office, "alice")
    await refused_without_change(
        office,
        ErrorCode.INVALID_ARGUMENT,
        office.keys.issue(admin, "alice", admin_key=True),
    )


@pytest.mark.parametrize(
    ("agent", "code"),
    [
        ("nobody", ErrorCode.NOT_FOUND),
        ("system", ErrorCode.NOT_FOUND),
        ("Not A Name", ErrorCode.INVALID_ARGUMENT),
        ("alice", ErrorCode.GONE),
    ],
)
async def test_a_key_only_goes_to_an_enabled_agent(
    office: PostOffice, agent: str, code: ErrorCode
) -> None:
    admin = await owner(office)
    await keyed(office, "alice")
    await office.admin.disable_agent(admin, "alice")
    await refused_without_change(office, code, office.keys.issue(admin, agent))


@pytest.mark.parametrize(
    ("label", "code"),
    [
        ("l" * 201, ErrorCode.TOO_LARGE),
        ("two\nlines", ErrorCode.INVALID_ARGUMENT),
        ("a\rb", ErrorCode.INVALID_ARGUMENT),
        ("a\u2028b", ErrorCode.INVALID_ARGUMENT),
    ],
)
async def test_a_label_is_one_line_of_at_most_200_characters(
    office: PostOffice, label: str, code: ErrorCode
) -> None:
    """Too long is `too_large` with its limit and size, as any text over its limit."""
    admin = await owner(office)
    await keyed(office, "alice")
    refused = await refused_without_change(
        office, code, office.keys.issue(admin, "alice", label=label)
    )
    if code is ErrorCode.TOO_LARGE:
        assert refused.details == {"limit": 200, "size": 201}


@pytest.mark.parametrize("agent", ["nobody", "system"])
async def test_the_keys_of_an_agent_that_is_not_there_are_not_found(
    office: PostOffice, agent: str
) -> None:
    """Not an empty list, which would say the agent is there and holds none."""
    await refused_without_change(
        office, ErrorCode.NOT_FOUND, office.keys.list_keys(await owner(office), agent)
    )


async def test_revoking_an_unknown_key_is_not_found(office: PostOffice) -> None:
    admin = await owner(office)
    await refused_without_change(
        office, ErrorCode.NOT_FOUND, office.keys.revoke(admin, "k_unknown")
    )


async def test_revoking_a_revoked_key_changes_nothing(office: PostOffice) -> None:
    admin = await owner(office)
    _, issued = await office.admin.create_agent(admin, "alice")
    first = await office.keys.revoke(admin, issued.id)
    before = await snapshot(office.store)
    assert await office.keys.revoke(admin, issued.id) == first
    assert await snapshot(office.store) == before


async def test_the_last_admin_key_cannot_be_revoked(office: PostOffice) -> None:
    admin = await owner(office)
    (configured,) = await office.keys.list_keys(admin, "owner")
    await refused_without_change(
        office, ErrorCode.CONFLICT, office.keys.revoke(admin, configured.id)
    )
    await office.keys.issue(admin, "owner", admin_key=True)
    assert (await office.keys.revoke(admin, configured.id)).revoked_at is not None


# -- self-registration ---------------------------------------------------------------------------


async def test_self_registration_is_forbidden_unless_the_owner_opens_it(office: PostOffice) -> None:
    assert office.settings.open_registration is False
    await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.keys.self_register("drifter", ip=ADDRESS)
    )


async def test_a_self_registered_agent_is_untrusted_and_its_key_works_at_once(
    open_office: OpenOffice,
) -> None:
    office = await open_office(open_registration=True)
    issued = await office.keys.self_register(
        "drifter", description="a stranger", project="shop", ip=ADDRESS
    )
    caller = await office.keys.authenticate(issued.key, ip=ADDRESS)
    assert (caller.agent, caller.trust, caller.admin) == ("drifter", Trust.UNTRUSTED, False)
    me = await office.directory.me(caller)
    assert (me.description, me.project, me.trust) == ("a stranger", "shop", "untrusted")
    (entry,) = await office.admin.audit_log(await owner(office), action="agent.registered")
    assert (entry.actor, entry.target, entry.ip) == ("drifter", "drifter", ADDRESS)


async def test_registration_is_limited_per_address_and_hour(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    office = await open_office(open_registration=True, register_rate_per_hour=2)
    clock.now -= clock.now % 3600  # on the hour, so what is left of it is easy to say
    await office.keys.self_register("first", ip=ADDRESS)
    await office.keys.self_register("second", ip=ADDRESS)
    limited = await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.keys.self_register("third", ip=ADDRESS)
    )
    assert limited.retry_after_s == 3600
    await office.keys.self_register("elsewhere", ip="198.51.100.1")
    clock.advance(3600)
    await office.keys.self_register("third", ip=ADDRESS)


async def test_registrations_are_limited_over_any_hour_not_per_clock_hour(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """Counted per clock hour, two a minute before the hour and two just after it all went
    through: twice the limit within two minutes."""
    office = await open_office(open_registration=True, register_rate_per_hour=2)
    clock.now += 3600 - clock.now % 3600 - MINUTE  # a minute before the hour
    await office.keys.self_register("first", ip=ADDRESS)
    await office.keys.self_register("second", ip=ADDRESS)
    clock.advance(2 * MINUTE)
    limited = await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.keys.self_register("third", ip=ADDRESS)
    )
    assert limited.retry_after_s == 3600 - 2 * MINUTE
    clock.advance(limited.retry_after_s)
    await office.keys.self_register("third", ip=ADDRESS)


async def test_registrations_from_every_address_together_are_limited_too(
    open_office: OpenOffice, clock: FakeClock
) -> None:
    """Self-registered agents are never deleted: without a cap over all addresses, a client
    with many addresses could fill the directory for good."""
    office = await open_office(
        open_registration=True, register_rate_per_hour=5, register_total_per_hour=3
    )
    clock.now -= clock.now % 3600
    for n in range(3):
        await office.keys.self_register(f"agent-{n}", ip=f"198.51.100.{n + 1}")
    limited = await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.keys.self_register("agent-3", ip="203.0.113.9")
    )
    assert limited.details["limit"] == 3
    assert "all addresses" in limited.message
    assert limited.retry_after_s == 3600
    clock.advance(3600)
    await office.keys.self_register("agent-3", ip="203.0.113.9")


async def test_a_registration_one_address_may_not_make_counts_for_no_one_else(
    open_office: OpenOffice,
) -> None:
    office = await open_office(
        open_registration=True, register_rate_per_hour=1, register_total_per_hour=2
    )
    await office.keys.self_register("first", ip=ADDRESS)
    await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.keys.self_register("second", ip=ADDRESS)
    )
    await office.keys.self_register("elsewhere", ip="198.51.100.1")


async def test_the_default_registration_cap_is_a_hundred_an_hour_in_all(
    open_office: OpenOffice,
) -> None:
    office = await open_office(open_registration=True)
    for n in range(100):
        await office.keys.self_register(f"agent-{n}", ip=f"198.51.100.{n // 10 + 1}")
    await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.keys.self_register("late", ip="203.0.113.9")
    )


async def test_the_default_registration_rate_is_ten_an_hour(open_office: OpenOffice) -> None:
    office = await open_office(open_registration=True)
    for n in range(10):
        await office.keys.self_register(f"agent-{n}", ip=ADDRESS)
    await refused_without_change(
        office, ErrorCode.RATE_LIMITED, office.keys.self_register("agent-10", ip=ADDRESS)
    )


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("alice", ErrorCode.CONFLICT),
        ("gone", ErrorCode.CONFLICT),
        ("owner", ErrorCode.FORBIDDEN),
        ("agentpost", ErrorCode.FORBIDDEN),
        ("Bad Name", ErrorCode.INVALID_ARGUMENT),
    ],
)
async def test_a_taken_reserved_or_malformed_name_cannot_be_registered(
    open_office: OpenOffice, name: str, code: ErrorCode
) -> None:
    office = await open_office(open_registration=True)
    admin = await owner(office)
    await keyed(office, "alice")
    await keyed(office, "gone")
    await office.admin.disable_agent(admin, "gone")  # names are never reused
    if code is not ErrorCode.CONFLICT:
        await refused_without_change(office, code, office.keys.self_register(name, ip=ADDRESS))
        return
    before = await snapshot(office.store)
    with pytest.raises(AgentpostError) as caught:
        await office.keys.self_register(name, ip=ADDRESS)
    assert caught.value.code is code
    after = await snapshot(office.store)
    assert {t: rows for t, rows in after.items() if t != "rate_windows"} == {
        t: rows for t, rows in before.items() if t != "rate_windows"
    }  # only counted toward the address's registrations


async def test_with_a_roster_only_its_names_may_register(open_office: OpenOffice) -> None:
    office = await open_office(open_registration=True, agents=["alice"])
    await refused_without_change(
        office, ErrorCode.FORBIDDEN, office.keys.self_register("drifter", ip=ADDRESS)
    )
    assert (await office.keys.self_register("alice", ip=ADDRESS)).agent == "alice"
