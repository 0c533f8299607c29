"""REST routes for signed checkpoints, under ``/v1/checkpoints`` (docs/integrity.md)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import Controller, get, post
from litestar.datastructures import State
from litestar.params import FromPath, FromQuery, JSONBody, Parameter

from baton.server.api.auth import require_admin
from baton.server.api.deps import CallerDep, NamespaceDep
from baton.server.api.problems import problems
from baton.server.maintenance.checkpoints import (
    MAX_SEQ,
    Checkpoint,
    CheckpointReport,
    CheckpointStore,
    Exported,
    key_id,
)
from baton.server.model.errors import NotFound
from baton.server.model.grants import unguarded


class PublicKey(msgspec.Struct, kw_only=True):
    algorithm: str
    public_key: str
    key_id: str


class VerifyBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Verify against checkpoint ``seq`` kept here (default: the latest), or against an
    ``export`` kept elsewhere."""

    seq: Annotated[int, msgspec.Meta(ge=1, le=MAX_SEQ)] | None = None
    export: Exported | None = None
    public_key: str | None = None  # a key you trust (base64 Ed25519); default: this server's


def _checkpoints(ns: NamespaceDep, state: State) -> CheckpointStore:
    return CheckpointStore(ns, state.signing_key, state.checkpoints_seen)


class CheckpointController(Controller):
    path = "/v1/checkpoints"
    tags = ("integrity",)

    @get("/", summary="Checkpoints, newest first", responses=problems())
    async def list_checkpoints(
        self, ns: NamespaceDep, state: State, limit: Annotated[int, Parameter(ge=1, le=500)] = 50
    ) -> list[Checkpoint]:
        return await _checkpoints(ns, state).list(limit)

    @post("/", summary="Take a signed checkpoint now (admin)", responses=problems(409, 503))
    async def take(
        self, ns: NamespaceDep, state: State, caller: CallerDep, force: FromQuery[bool] = False
    ) -> Checkpoint:
        """Refused (409) when the store lost what the previous checkpoint held (a record
        forgotten with a sealed audit entry is no loss), or its checkpoints were rolled
        back; ``force=true`` signs anyway."""
        require_admin(caller, "taking a checkpoint")
        taken = await _checkpoints(ns, state).take(force=force)
        assert taken is not None  # only_if_changed is off
        await ns.durable()
        return taken

    @get("/key", summary="The public key checkpoints are signed with", responses=problems())
    async def key(self, ns: NamespaceDep, state: State) -> PublicKey:
        public = _checkpoints(ns, state).public_key
        return PublicKey(algorithm="Ed25519", public_key=public, key_id=key_id(public))

    @get(
        "/{seq:int}/export",
        summary="A checkpoint with its leaves, to keep elsewhere",
        responses=problems(404),
    )
    async def export(
        self, seq: FromPath[int], ns: NamespaceDep, state: State, caller: CallerDep
    ) -> Exported:
        await ns.grants.check(caller, [unguarded("checkpoint export")])  # every ref's name
        return await _checkpoints(ns, state).export(seq)

    @post(
        "/verify",
        summary="Compare the store with a checkpoint: missing, behind, changed",
        status_code=200,
        responses=problems(404, 413),
    )
    async def verify(
        self,
        ns: NamespaceDep,
        state: State,
        caller: CallerDep,
        data: JSONBody[VerifyBody | None] = None,
    ) -> CheckpointReport:
        await ns.grants.check(caller, [unguarded("checkpoint verify")])
        checkpoints = _checkpoints(ns, state)
        body = data or VerifyBody()
        exported = body.export or await checkpoints.export(body.seq)
        if exported.checkpoint.namespace != ns.name:
            raise NotFound(
                f"checkpoint of namespace {exported.checkpoint.namespace}, not {ns.name}"
            )
        return await checkpoints.verify(exported, body.public_key)
