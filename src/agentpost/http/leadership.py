"""Leadership: one leader per project, as a lease with a fencing term."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from agentpost.http.deps import Me, Office
from agentpost.http.routing import api_router
from agentpost.http.schemas import Body, may_be_left_out

router = api_router(prefix="/v1/leadership", tags=["leadership"])


class ClaimBody(Body):
    project: str | None = Field(None, description="Default: your session's project.")
    force: bool = Field(False, description="Take the seat from a live holder (owner only).")


class ReleaseBody(Body):
    project: str | None = Field(None, description="Default: your session's project.")


@router.get("", operation_id="leader")
async def leader(office: Office, me: Me, project: str | None = None) -> dict[str, Any]:
    """Who leads the project (default: yours), under which term, until when unless renewed."""
    return (await office.leadership.leader(me, project)).to_dict()


@router.get("/all", operation_id="leaders")
async def leaders(office: Office, me: Me) -> dict[str, Any]:
    """Every project's seat that was ever taken, held or free."""
    return {"leaders": [seat.to_dict() for seat in await office.leadership.leaders()]}


@router.post("/claim", operation_id="claim_leadership")
async def claim(
    body: Annotated[ClaimBody, may_be_left_out(ClaimBody)], office: Office, me: Me
) -> dict[str, Any]:
    """Take your project's seat: a conflict while another live session holds it."""
    return (await office.leadership.claim(me, body.project, force=body.force)).to_dict()


@router.post("/release", operation_id="release_leadership")
async def release(
    body: Annotated[ReleaseBody, may_be_left_out(ReleaseBody)], office: Office, me: Me
) -> dict[str, Any]:
    """Step down: the seat is free for the next eligible session. A caller that does not lead
    (its release sent again) is answered the seat as it stands, `released` false."""
    return (await office.leadership.release(me, body.project)).to_dict()
