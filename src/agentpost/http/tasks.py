"""Delegated tasks and blocking requests."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/v1", tags=["tasks"])
