"""The operations of file reservations."""

from __future__ import annotations


class ReservationOperations:
    """Listed under their OpenAPI operation ids; both clients inherit them."""
