"""The installation's key: the Ed25519 key checkpoints are signed with, and the seal of the
audit log derived from it (docs/integrity.md).

It is ``BATON_SIGNING_KEY`` (the base64 of a 32-byte Ed25519 seed), else the file
``BATON_SIGNING_KEY_FILE`` names (``signing.key`` in the data dir by default), created on
first use. Every process that signs checkpoints or forgets (API replicas, workers,
``baton mcp``) must hold the same one: a forgetting sealed with another key explains nothing
to a checkpoint.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import msgpack
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from baton.server.runtime.settings import Settings

KEY_FILE = "signing.key"
SEAL_CONTEXT = b"baton audit seal 1"  # what the seal key is derived for, and its format


def key_path(settings: Settings) -> Path:
    return settings.signing_key_file or settings.data_dir / KEY_FILE


def load_signing_key(settings: Settings) -> Ed25519PrivateKey:
    """The installation's key (see the module); its file created (mode 0600) when missing."""
    if settings.signing_key:
        return _key_from(settings.signing_key, "BATON_SIGNING_KEY")
    path = key_path(settings)
    if not path.exists():
        # Written to a file of its own, then linked into place: processes starting together
        # (``baton serve --workers N``, replicas sharing a volume) never read a half-written
        # key, and the first link wins.
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        draft = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
        descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(base64.b64encode(os.urandom(32)).decode() + "\n")
        try:
            os.link(draft, path)
        except FileExistsError:
            pass  # another process made the key first: use theirs
        finally:
            draft.unlink()
    return _key_from(path.read_text().strip(), str(path))


def _key_from(text: str, source: str) -> Ed25519PrivateKey:
    try:
        seed = base64.b64decode(text, validate=True)
        return Ed25519PrivateKey.from_private_bytes(seed)
    except ValueError:
        raise ValueError(f"{source} must be the base64 of a 32-byte Ed25519 seed") from None


def seal_key_of(key: Ed25519PrivateKey) -> bytes:
    """The key audit entries are sealed with: an HMAC of the signing key's seed, so that
    whoever can seal can sign, and nobody else can do either."""
    return hmac.new(key.private_bytes_raw(), SEAL_CONTEXT, hashlib.sha256).digest()


def seal(seal_key: bytes, parts: Sequence[bytes]) -> str:
    """The HMAC-SHA256 of ``parts`` (packed as one msgpack list), in hex."""
    return hmac.new(seal_key, msgpack.packb(list(parts)), hashlib.sha256).hexdigest()


class InstallationKey:
    """The installation's key of ``settings``, read (or created) on first use: a process
    that never signs or forgets never touches the file."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def private(self) -> Ed25519PrivateKey:
        return load_signing_key(self.settings)

    @cached_property
    def seal_key(self) -> bytes:
        return seal_key_of(self.private)
