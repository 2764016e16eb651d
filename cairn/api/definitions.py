"""``/v1/workflows``: the definitions a namespace sees — its own and those shared with it
— one definition as registered, registering one, and sharing them (docs/access.md
#namespaces).

Everything is resolved within the caller's namespace, then what is shared with it: a
workflow another namespace owns and did not share is 404, as a missing one (the answer
does not tell that it exists). Registering and sharing are an admin's (``register``,
``share``) and audited.

A definition sent to ``POST /v1/workflows`` is checked whole — every fault listed, 422
— but its handlers are not imported here: an API process need not hold the workflows'
code, and importing a module a request names would run that module's code in the API.
A worker imports them when it runs the first node (``cairn register`` and ``cairn
validate`` import them before registering).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from cairn.api.access import Reader, allowed, draft_of
from cairn.api.deps import Runtime_
from cairn.api.models import ShareRequest
from cairn.api.scope import ERRORS
from cairn.definitions.loader import load_definition
from cairn.definitions.text import parse_text
from cairn.engine.sharing import Sharing
from cairn.errors import DefinitionFault, InvalidInput, WorkflowDefinitionError
from cairn.http.models import (
    Registered,
    ShareList,
    ShareView,
    WorkflowDetail,
    WorkflowInfo,
    WorkflowList,
)
from cairn.model.principals import Permission, Principal
from cairn.model.workflow_names import NAMESPACE, WORKFLOW, WorkflowName, qualified
from cairn.runtime import Runtime
from cairn.store.definitions import ShareRecord

router = APIRouter(prefix="/v1")

Registrar = Annotated[
    Principal, Depends(allowed(Permission.REGISTER, action="definitions.register"))
]
Sharer = Annotated[Principal, Depends(allowed(Permission.SHARE, action="definitions.share"))]
Revoker = Annotated[Principal, Depends(allowed(Permission.SHARE, action="definitions.unshare"))]
ShareReader = Annotated[
    Principal, Depends(allowed(Permission.SHARE, action="definitions.shares_read"))
]
Name = Annotated[
    str,
    Path(min_length=1, max_length=200, pattern=f"^{WORKFLOW.pattern}$", description="A workflow."),
]
Grantee = Annotated[
    str,
    Path(
        min_length=1, max_length=100, pattern=f"^{NAMESPACE.pattern}$", description="A namespace."
    ),
]
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")
DEFINITION_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such workflow in this key's namespace, nor shared with it."},
    **{k: v for k, v in ERRORS.items() if k != 404},
}


@router.get("/workflows", response_model=WorkflowList, responses=ERRORS)
def list_workflows(runtime: Runtime_, who: Reader) -> WorkflowList:
    """The workflows the namespace sees, every version: its own, and those another
    namespace shares with it (``shared``: true, ``namespace`` the owner's)."""
    with runtime.store.reading() as tx:
        rows = tx.visible_workflows(who.namespace)
    return WorkflowList(
        workflows=[
            WorkflowInfo(
                namespace=row.namespace,
                name=row.name,
                version=row.version,
                registered_at=row.registered_at,
                shared=row.namespace != who.namespace,
            )
            for row in rows
        ]
    )


@router.get("/workflows/{name}", response_model=WorkflowDetail, responses=DEFINITION_ERRORS)
def read_workflow(
    name: Name,
    runtime: Runtime_,
    who: Reader,
    version: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    namespace: Annotated[
        str | None,
        Query(
            pattern=f"^{NAMESPACE.pattern}$",
            description="The namespace that owns it (default: this key's, then one that "
            "shares a workflow of this name with it).",
        ),
    ] = None,
) -> WorkflowDetail:
    """One definition as registered (the newest version it may see, unless ``version``)."""
    written = str(WorkflowName(name, namespace))
    definition, _now = runtime.orchestrator.registry.visible(who.namespace, written, version)
    return WorkflowDetail(
        namespace=definition.namespace,
        name=definition.name,
        version=definition.version,
        format=definition.format,
        shared=definition.namespace != who.namespace,
        spec=dict(definition.spec),
    )


@router.post(
    "/workflows",
    status_code=201,
    response_model=Registered,
    responses={
        200: {"model": Registered, "description": "Registered already, identically."},
        409: {"description": "This version is registered with another definition."},
        415: {"description": "Neither JSON nor YAML."},
        **ERRORS,
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "A workflow definition, as a .yaml or .json file holds it.",
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "application/yaml": {"schema": {"type": "string"}},
            },
        }
    },
)
async def register_workflow(
    request: Request, response: Response, runtime: Runtime_, who: Registrar
) -> Registered:
    """Register a definition into the key's namespace (and add or bring up to date the
    schedules it declares there). A changed definition under a registered version is
    refused (409 ``version_conflict``); the same one again is 200, nothing changed."""
    text = (await request.body()).decode("utf-8", "replace")
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    suffix = ".yaml" if media in YAML_TYPES else ".json"
    registered = await run_in_threadpool(_register, runtime, who.namespace, text, suffix)
    definition, created = registered
    draft = draft_of(request)
    if draft is not None:
        draft.target = qualified(who.namespace, definition.key)
        draft.detail.update(created=created)
    if not created:
        response.status_code = 200
    return Registered(
        namespace=who.namespace,
        name=definition.name,
        version=definition.version,
        created=created,
    )


def _register(runtime: Runtime, namespace: str, text: str, suffix: str) -> tuple[Any, bool]:
    if not text.strip():
        raise InvalidInput("the body is a workflow definition: it is empty")
    source = "the request's definition"
    try:
        parsed = parse_text(text, suffix, source=source)
    except RecursionError:
        raise WorkflowDefinitionError(
            [DefinitionFault("too_complex", "nested too deeply")], source=source
        ) from None
    definition = load_definition(parsed, source=source, resolve=False)
    orchestrator = runtime.orchestrator
    registry = orchestrator.registry
    created = registry.register(definition, namespace)
    orchestrator.schedules.declare(namespace, definition)
    return definition, created


# -- shares ------------------------------------------------------------------------------


def _share_view(record: ShareRecord) -> ShareView:
    return ShareView(
        namespace=record.namespace,
        workflow=record.workflow,
        grantee=record.grantee,
        version=record.version,
        created_at=record.created_at,
        created_by=record.created_by,
    )


@router.post(
    "/workflows/{name}/shares",
    status_code=201,
    response_model=ShareView,
    responses={200: {"model": ShareView, "description": "Shared so already."}, **ERRORS},
)
def share_workflow(
    *,
    name: Name,
    body: ShareRequest,
    request: Request,
    response: Response,
    runtime: Runtime_,
    who: Sharer,
) -> ShareView:
    """Let ``namespace`` see and start this workflow of the key's namespace — every
    version (``version`` omitted), or one. Its runs are that namespace's and execute
    this namespace's definition."""
    share, created = Sharing(runtime.store).share(
        who.namespace, name, body.namespace, body.version, by=who.actor
    )
    _note(request, grantee=body.namespace, version=body.version, created=created)
    if not created:
        response.status_code = 200
    return _share_view(share)


@router.get("/shares", response_model=ShareList, responses=ERRORS)
def list_all_shares(runtime: Runtime_, who: ShareReader) -> ShareList:
    """Every share of the key's namespace's workflows, with whom."""
    return ShareList(shares=[_share_view(s) for s in Sharing(runtime.store).shares(who.namespace)])


@router.get("/workflows/{name}/shares", response_model=ShareList, responses=ERRORS)
def list_shares(name: Name, runtime: Runtime_, who: ShareReader) -> ShareList:
    """With whom the key's namespace shares this workflow."""
    return ShareList(
        shares=[_share_view(s) for s in Sharing(runtime.store).shares(who.namespace, name)]
    )


@router.delete("/workflows/{name}/shares/{grantee}", status_code=204, responses=ERRORS)
def revoke_share(
    *,
    name: Name,
    grantee: Grantee,
    request: Request,
    runtime: Runtime_,
    who: Revoker,
    version: Annotated[
        int | None, Query(ge=1, le=2**31 - 1, description="The share of one version.")
    ] = None,
) -> Response:
    """Take a share back (of every version, or of ``version``): the namespace can no
    longer see the workflow or start runs of it; its runs started already go on."""
    Sharing(runtime.store).revoke(who.namespace, name, grantee, version)
    _note(request, grantee=grantee, version=version)
    return Response(status_code=204)


def _note(request: Request, **detail: Any) -> None:
    draft = draft_of(request)
    if draft is not None:
        draft.detail.update(detail)
