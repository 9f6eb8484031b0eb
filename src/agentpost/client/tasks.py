"""The operations of delegated tasks and blocking requests."""

from __future__ import annotations


class TaskOperations:
    """Listed under their OpenAPI operation ids; both clients inherit them."""
