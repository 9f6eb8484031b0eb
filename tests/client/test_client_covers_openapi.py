"""Every operation the service serves has a client method, on the same route, taking every
parameter the route takes; and the client has no method for a route that is not served.

Read from the OpenAPI document of a running `agentpost serve`, so a new route without a client
method (or a renamed parameter) fails here, not in a user's script.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from agentpost.client import AsyncClient, Client
from agentpost.client.operation import operations
from service_process import Service

pytestmark = pytest.mark.anyio

STREAMS = {"events": ("GET", "/v1/events")}
"""Operations that are not one request and one answer: a method of each client by hand."""
CURSOR_HEADERS = {"last-event-id"}
"""Headers the client sets itself (the event stream's cursor), never a caller's argument."""


async def served_operations(service: Service) -> dict[str, dict[str, Any]]:
    """{operation id: {method, path, parameters}} of the service's OpenAPI document."""
    document = (await service.client().get("/openapi.json")).json()
    schemas = document["components"]["schemas"]
    found: dict[str, dict[str, Any]] = {}
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            names = {
                p["name"].lower().replace("-", "_")
                for p in operation.get("parameters", [])
                if p["name"].lower() not in CURSOR_HEADERS
            }
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None:
                ref = body["schema"]["$ref"].rpartition("/")[2]
                names |= set(schemas[ref]["properties"])
            found[operation["operationId"]] = {
                "method": method.upper(),
                "path": path,
                "parameters": names,
            }
    return found


def accepted(method: Any) -> set[str]:
    return set(inspect.signature(method).parameters) - {"self"}


async def test_every_served_operation_has_a_method_on_both_clients(service: Service) -> None:
    served = await served_operations(service)
    offered = set(operations(AsyncClient)) | set(STREAMS)
    assert sorted(set(served) - offered) == [], "operations without a client method"
    assert sorted(offered - set(served)) == [], "client methods for operations not served"
    assert [name for name in served if not hasattr(Client, name)] == []
    assert [name for name in served if not hasattr(AsyncClient, name)] == []


async def test_each_method_speaks_its_operations_route(service: Service) -> None:
    served = await served_operations(service)
    routes = {name: (op.method, op.path) for name, op in operations(AsyncClient).items()}
    routes.update(STREAMS)
    wrong = {
        name: (routes[name], (found["method"], found["path"]))
        for name, found in served.items()
        if routes[name] != (found["method"], found["path"])
    }
    assert wrong == {}


async def test_each_method_takes_every_parameter_of_its_operation(service: Service) -> None:
    served = await served_operations(service)
    methods = {name: op.build for name, op in operations(AsyncClient).items()}
    methods["events"] = AsyncClient.events
    missing = {
        name: sorted(found["parameters"] - accepted(methods[name]))
        for name, found in served.items()
        if found["parameters"] - accepted(methods[name])
    }
    assert missing == {}


async def test_both_clients_show_each_operations_own_signature_and_docstring() -> None:
    """What type checkers and `help()` read: the operation's, not a generic wrapper's."""
    async with AsyncClient("http://127.0.0.1:1", "ap_x") as async_client:
        with Client("http://127.0.0.1:1", "ap_x") as sync_client:
            for name, operation in operations(AsyncClient).items():
                assert operation.__doc__, f"{name} has no docstring"
                bound_async = getattr(async_client, name)
                bound_sync = getattr(sync_client, name)
                assert inspect.iscoroutinefunction(bound_async)
                assert not inspect.iscoroutinefunction(bound_sync)
                for bound in (bound_async, bound_sync):
                    assert bound.__name__ == name
                    assert bound.__doc__ == operation.__doc__
                    assert inspect.signature(bound) == inspect.signature(operation.build)
