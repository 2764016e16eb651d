"""``/v1/runs/{id}/forks``, ``/v1/runs/{id}/anomalies`` and an artifact's content: where a
run's lineage went (the live forks started from it), what its watch caught (each anomaly,
what was done, and the scene kept with it), and what it stored. Read by the API and by
the console's run page."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from cairn.api.access import Reader, allowed
from cairn.api.deps import Runtime_
from cairn.api.models import AnomalyList, ForkList
from cairn.api.redact import without_payloads
from cairn.api.scope import ERRORS, RunId, head_in
from cairn.artifacts import ArtifactRegistry, open_store
from cairn.errors import RunNotFound
from cairn.model.principals import Permission, Principal

router = APIRouter(prefix="/v1")
FORKS_MAX = 200
# An artifact's content is a payload: reading it needs the permission, and is audited.
ContentReader = Annotated[
    Principal, Depends(allowed(Permission.READ, Permission.PAYLOADS, action="run.artifact"))
]
# A name as a file name: what a browser saves it as, without a path or a quote.
UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@router.get("/runs/{run_id}/forks", response_model=ForkList, responses=ERRORS)
def run_forks(run_id: RunId, runtime: Runtime_, who: Reader) -> ForkList:
    """The live forks started from the run (``POST /v1/runs/{id}/fork``), oldest first,
    each with the seq it was forked at and its status; the first 200."""
    head_in(runtime, run_id, who.namespace)
    with runtime.store.reading() as tx:
        found = tx.forks_of(who.namespace, run_id, FORKS_MAX)
    return ForkList(forks=found)


@router.get("/runs/{run_id}/anomalies", response_model=AnomalyList, responses=ERRORS)
def run_anomalies(run_id: RunId, runtime: Runtime_, who: Reader) -> AnomalyList:
    """Each anomaly the run's watch caught (the newest 20, oldest first): its kind, what
    was done (intervened, failed, handed_off), the node and visit, when, and — with the
    payloads permission — its detail and the scene kept with it (the last moves with their
    state fingerprints, tool calls, the watched fields' changes; docs/anomalies.md)."""
    view = runtime.orchestrator.get_run(run_id)
    if view.namespace != who.namespace or view.state is None:
        raise RunNotFound(f"no run {run_id}")
    records = list(view.state.anomalies)
    if not who.may(Permission.PAYLOADS):
        records = [{**without_payloads(r), "detail": None} for r in records]
    return AnomalyList(anomalies=records)


@router.get(
    "/runs/{run_id}/artifacts/content",
    response_class=Response,
    responses={**ERRORS, 200: {"content": {"application/octet-stream": {}}}},
)
def artifact_content(
    run_id: RunId,
    name: Annotated[str, Query(min_length=1, max_length=200)],
    version: Annotated[int, Query(ge=1, le=2_147_483_647)],
    runtime: Runtime_,
    who: ContentReader,
) -> Response:
    """The content of version ``version`` of the run's artifact ``name``, as stored: an
    attachment (never rendered by a browser on this origin), with its SHA-256 in
    ``ETag``. Payloads: the permission is needed, and the read is audited."""
    head_in(runtime, run_id, who.namespace)
    info = ArtifactRegistry(runtime.store).get(run_id, name, version)
    data = open_store(runtime.settings.effective_artifacts_url).read(info.sha256)
    filename = f"{UNSAFE.sub('_', name)}.v{version}"
    return Response(
        data,
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": f'attachment; filename="{filename}"',
            "ETag": f'"{info.sha256}"',
            "X-Content-Type-Options": "nosniff",
        },
    )
