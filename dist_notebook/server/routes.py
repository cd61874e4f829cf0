"""The URL table of the REST API, under ``{base_url}/dist-notebook/api/``.

Each answer's shape is declared once in dist_notebook/contracts.py (ClusterModel,
RunModel, RunDetailModel, MetricsPage, ActionReply, DeleteReply, PruneReply), and the
panel's TypeScript interfaces are generated from it (extension/src/contracts.ts).

GET  clusters                      clusters, newest first, each with its ranks; a rank
                                   that a run still going holds (pending or running in
                                   it) is "busy", as %dist_cluster status shows it (the
                                   store keeps the engine's own "idle")
GET  clusters/<id>                 one cluster
POST clusters/<id>/interrupt       the owning kernel's interrupt (its run cancelled); with
                                   the kernel gone, SIGINT to every engine
POST clusters/<id>/stop            %dist_cluster stop in the owning kernel; with the kernel
                                   gone, the server stops the processes (idempotent)
GET  runs?cluster=<id>&state=<s>   runs, newest first, without their code
GET  runs/<id>                     one run, with its code, flags, per-rank states and the
                                   last lines of each rank's output
DELETE runs/<id>                   delete a run that ended, with its records
POST runs/prune {"before": <s>}    delete ended runs started before; {"runs", "clusters"}
GET  runs/<id>/metrics?since=<seq>&limit=<n>
                                   {"run", "since", "last_seq", "more", "records"}: the
                                   records with seq > since, oldest first, each
                                   {seq, rank, step, time, <metric>: value, ...}; pass
                                   last_seq as since next time, ask again at once while
                                   more is true. Each record is
                                   dist_notebook.protocol's Record.to_json():
                                   {seq, rank, step, time, step_time, comm_time,
                                   samples, metrics: {<name>: value}}, values valid
                                   JSON ("nan", "inf", "-inf" for non-finite ones).
GET  runs/<id>/summary             the run's derived measures (protocol.RunSummary):
                                   per rank and per host samples/s, step time, comm
                                   time, time outside comm, others' wait,
                                   straggler; steps done.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.utils import url_path_join

from .handlers import (
    MANAGER_SETTING,
    ClusterActionHandler,
    ClusterHandler,
    ClustersHandler,
    MetricsHandler,
    PruneHandler,
    RunHandler,
    RunsHandler,
    SummaryHandler,
)
from .manager import RunStoreManager

_ID = r"([^/]+)"


def setup_routes(web_app: Any, manager: RunStoreManager) -> None:
    """Add the API's handlers to the server's tornado application."""
    base_url = web_app.settings["base_url"]

    def api(*parts: str) -> str:
        return url_path_join(base_url, "dist-notebook", "api", *parts)

    web_app.settings[MANAGER_SETTING] = manager
    web_app.add_handlers(
        ".*$",
        [
            (api("clusters"), ClustersHandler),
            (api("clusters", _ID), ClusterHandler),
            (api("clusters", _ID, "(interrupt|stop)"), ClusterActionHandler),
            (api("runs"), RunsHandler),
            (api("runs", "prune"), PruneHandler),
            (api("runs", _ID), RunHandler),
            (api("runs", _ID, "metrics"), MetricsHandler),
            (api("runs", _ID, "summary"), SummaryHandler),
        ],
    )
