"""Leadership: one leader per project, as a lease with a fencing term."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/v1/leaders", tags=["leadership"])
