"""Advisory file reservations."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/v1/reservations", tags=["reservations"])
