"""Every route refuses a request without credentials."""

from __future__ import annotations

import pytest
from tornado.httpclient import HTTPClientError

from .conftest import CLUSTER, RUNNING

ROUTES = [
    ("GET", ("clusters",)),
    ("GET", ("clusters", CLUSTER)),
    ("GET", ("runs",)),
    ("GET", ("runs", RUNNING)),
    ("GET", ("runs", RUNNING, "metrics")),
    ("POST", ("clusters", CLUSTER, "interrupt")),
    ("POST", ("clusters", CLUSTER, "stop")),
]


@pytest.mark.parametrize(("method", "parts"), ROUTES)
async def test_route_refuses_anonymous_requests(
    jp_fetch, jp_serverapp, http_server_client, jp_base_url, filled_store, method, parts
):
    body = b"" if method == "POST" else None
    # with the token the route answers (a 409 is an answer: this cluster has no processes)
    try:
        await jp_fetch("dist-notebook", "api", *parts, method=method, body=body)
    except HTTPClientError as e:
        assert e.code == 409
    url = f"{jp_base_url}dist-notebook/api/{'/'.join(parts)}"
    response = await http_server_client.fetch(url, method=method, body=body, raise_error=False)
    assert response.code in (401, 403)
    # a wrong token is no better than none
    response = await http_server_client.fetch(
        url,
        method=method,
        body=body,
        headers={"Authorization": "token not-the-token"},
        raise_error=False,
    )
    assert response.code in (401, 403)
