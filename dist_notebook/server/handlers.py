"""HTTP handlers: each turns a request into one call on the manager and its answer into JSON.

Errors a client can cause are JSON with a message: an unknown id is 404, a bad parameter
400, a cluster that cannot be reached (or a run still going, to delete) 409, an interrupt
or stop that failed on the cluster 502, an unreadable run store 503.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from .manager import (
    METRICS_LIMIT_DEFAULT,
    ClusterActionError,
    ClusterUnreachableError,
    InvalidParameterError,
    RunInProgressError,
    RunStoreManager,
    StoreError,
    UnknownIdError,
)

AUTH_RESOURCE = "dist-notebook"
MANAGER_SETTING = "dist_notebook_manager"

F = TypeVar("F", bound=Callable[..., Awaitable[None]])


def _client_errors(method: F) -> F:
    """Turn the manager's errors into HTTP errors with the manager's message."""

    @functools.wraps(method)
    async def wrapper(self: BaseHandler, *args: Any, **kwargs: Any) -> None:
        try:
            await method(self, *args, **kwargs)
        except UnknownIdError as e:
            raise web.HTTPError(404, str(e.args[0])) from e
        except InvalidParameterError as e:
            raise web.HTTPError(400, str(e)) from e
        except (ClusterUnreachableError, RunInProgressError) as e:
            raise web.HTTPError(409, str(e)) from e
        except ClusterActionError as e:
            raise web.HTTPError(502, str(e)) from e
        except StoreError as e:
            raise web.HTTPError(503, str(e)) from e

    return wrapper  # type: ignore[return-value]


class BaseHandler(APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def manager(self) -> RunStoreManager:
        return self.settings[MANAGER_SETTING]  # type: ignore[no-any-return]

    def int_argument(self, name: str, default: int) -> int:
        raw = self.get_query_argument(name, None)
        if raw is None or raw == "":
            return default
        try:
            return int(raw)
        except ValueError:
            raise web.HTTPError(400, f"{name} must be an integer, not {raw!r}") from None

    def reply(self, body: Any) -> None:
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(body))


class ClustersHandler(BaseHandler):
    @web.authenticated
    @authorized
    @_client_errors
    async def get(self) -> None:
        self.reply(self.manager.clusters())


class ClusterHandler(BaseHandler):
    @web.authenticated
    @authorized
    @_client_errors
    async def get(self, cluster_id: str) -> None:
        self.reply(self.manager.cluster(cluster_id))


class ClusterActionHandler(BaseHandler):
    @web.authenticated
    @authorized
    @_client_errors
    async def post(self, cluster_id: str, action: str) -> None:
        if action == "interrupt":
            self.reply(await self.manager.interrupt(cluster_id))
        else:
            self.reply(await self.manager.stop(cluster_id))


class RunsHandler(BaseHandler):
    @web.authenticated
    @authorized
    @_client_errors
    async def get(self) -> None:
        cluster_id = self.get_query_argument("cluster", None) or None
        state = self.get_query_argument("state", None) or None
        self.reply(self.manager.runs(cluster_id=cluster_id, state=state))


class RunHandler(BaseHandler):
    @web.authenticated
    @authorized
    @_client_errors
    async def get(self, run_id: str) -> None:
        self.reply(self.manager.run(run_id))

    @web.authenticated
    @authorized
    @_client_errors
    async def delete(self, run_id: str) -> None:
        self.reply(self.manager.delete_run(run_id))


class PruneHandler(BaseHandler):
    @web.authenticated
    @authorized
    @_client_errors
    async def post(self) -> None:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, 'the body must be JSON: {"before": <seconds>}') from None
        if not isinstance(body, dict) or "before" not in body:
            raise web.HTTPError(400, 'the body must be JSON: {"before": <seconds>}')
        self.reply(self.manager.prune(body["before"]))


class MetricsHandler(BaseHandler):
    @web.authenticated
    @authorized
    @_client_errors
    async def get(self, run_id: str) -> None:
        since = self.int_argument("since", 0)
        limit = self.int_argument("limit", METRICS_LIMIT_DEFAULT)
        self.reply(self.manager.metrics(run_id, since=since, limit=limit))


class SummaryHandler(BaseHandler):
    @web.authenticated
    @authorized
    @_client_errors
    async def get(self, run_id: str) -> None:
        self.reply(self.manager.summary(run_id))
