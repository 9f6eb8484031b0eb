"""The leadership operations: who leads, claiming and releasing the seat."""

from __future__ import annotations


class LeadershipOperations:
    """Listed under their OpenAPI operation ids; both clients inherit them."""
