"""What was said: a thread, one message, the mail one sent with its receipts, a search.

Reads only, each of what the reader may see, never of what a block or an expiry hides. Lists
page back with `before` (a page's last id): a cursor the reader may not see is `not_found`,
so that a cursor tells nothing its reader could not read.
"""

from __future__ import annotations

from agentpost.config import Settings
from agentpost.domain import limits as rules
from agentpost.domain.errors import not_found
from agentpost.domain.models import Caller, Message, SentMessage
from agentpost.services import drafts, outbox
from agentpost.services.channels import member_channels
from agentpost.store import mail, reading, withheld
from agentpost.store.database import Connection, Store


class History:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    async def thread(
        self, caller: Caller, thread_id: str, limit: int = 50, before: str | None = None
    ) -> list[Message]:
        """A thread's newest `limit` messages the caller may see (with `before`, those older
        than that message), oldest first. A first page is never empty (that is `not_found`); a
        later one is, past the thread's start. It may be named by any of its messages' ids too:
        a reply's id is what a reader has in hand, and each message says its thread's own id."""
        thread = drafts.check_thread_id(thread_id) or ""
        rules.check_limit(limit)
        if before is not None:
            rules.check_id(before, "before")

        def tx(conn: Connection) -> list[Message]:
            channels = member_channels(conn, caller.agent)
            now = self.store.clock()
            before_seq = seen_seq(conn, caller, channels, before, now)
            named = reading.thread_named(conn, caller.agent, channels, thread, now)
            found = reading.thread_rows(conn, caller.agent, channels, named, limit, now, before_seq)
            return [mail.message_from_row(r, r.delivery_state) for r in found]

        found = await self.store.read(tx)
        if not found and before is None:
            raise not_found(f"no thread {thread_id!r} with messages you can see")
        return found

    async def get(self, caller: Caller, message_id: str) -> Message:
        rules.check_id(message_id, "message_id")

        def tx(conn: Connection) -> Message | None:
            channels = member_channels(conn, caller.agent)
            row = reading.visible_message(
                conn, caller.agent, channels, message_id, self.store.clock()
            )
            return None if row is None else mail.message_from_row(row, row.delivery_state)

        found = await self.store.read(tx)
        if found is None:
            raise not_found(f"no message {message_id!r} that you can see")
        return found

    async def sent(
        self, caller: Caller, limit: int = 20, before: str | None = None
    ) -> list[SentMessage]:
        """The caller's own mail, newest first, with each recipient's state; `before` (a page's
        last id, one of the caller's own) pages back."""
        rules.check_limit(limit)
        if before is not None:
            rules.check_id(before, "before")

        def tx(conn: Connection) -> list[SentMessage]:
            now = self.store.clock()
            before_seq = None
            if before is not None:
                before_seq = mail.sent_seq(conn, caller.agent, before)
                if before_seq is None:
                    raise not_found(f"no message {before!r} that you sent", before=before)
            rows = mail.sent_rows(conn, caller.agent, limit, before_seq)
            found = [mail.message_from_row(r) for r in rows]
            receipts = mail.receipts(conn, [m.seq for m in found], now)
            blockers = withheld.of_messages(conn, [m.seq for m in found if m.channel])
            return [
                SentMessage(
                    m,
                    outbox.with_silent_receipts(m, receipts[m.seq], blockers.get(m.seq, ()), now),
                )
                for m in found
            ]

        return await self.store.read(tx)

    async def search(
        self, caller: Caller, query: str, limit: int = 20, before: str | None = None
    ) -> list[Message]:
        """Newest first; `before` (a page's last id) pages back past the newest `limit`."""
        rules.check_limit(limit)
        words = rules.check_query(query).split()
        if before is not None:
            rules.check_id(before, "before")

        def tx(conn: Connection) -> list[Message]:
            channels = member_channels(conn, caller.agent)
            now = self.store.clock()
            before_seq = seen_seq(conn, caller, channels, before, now)
            found = reading.search_rows(
                conn, self.store.dialect, caller.agent, channels, words, limit, now, before_seq
            )
            return [mail.message_from_row(r, r.delivery_state) for r in found]

        await self.store.index_for_search()
        return await self.store.read(tx)


def seen_seq(
    conn: Connection, caller: Caller, channels: list[str], before: str | None, now: float
) -> int | None:
    """The `seq` of a page's cursor, which must be a message the caller may see (the inbox's
    cursor too)."""
    if before is None:
        return None
    anchor = reading.visible_message(conn, caller.agent, channels, before, now)
    if anchor is None:
        raise not_found(f"no message {before!r} that you can see", before=before)
    return int(anchor.seq)
