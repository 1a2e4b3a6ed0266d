"""Webhook signing secrets sealed at rest: envelope encryption with AES-256-GCM
(the ``cryptography`` package; nothing hand-rolled).

Each secret gets a data key of its own (32 random bytes): the secret is encrypted under
it, and the data key is encrypted ("wrapped") under the *key encryption key* kept
outside the database: ``WATCHKEEPER_SECRET_KEY``, or the key file
``<WATCHKEEPER_HOME>/secret.key`` (created with mode 0600 on first start when the
setting is unset). A row keeps ``sealed`` (nonce + ciphertext + tag), ``data_key``
(nonce + wrapped key + tag) and ``key_id`` (which key wrapped it: the first 16 hex
digits of a SHA-256 of the key, never the key). Both encryptions bind the tenant and
endpoint as associated data, so a sealed secret copied onto another tenant's row does
not open. A database dump alone can no longer sign; rotating the key (``watchkeeper
secrets rotate-key``) re-wraps the data keys and leaves the sealed secrets as they are.

The setting holds one key as URL-safe base64 of 32 bytes (``Keyring.generate()``
prints one), or several separated by commas: the first seals, every one opens (for
processes started before a rotation finished).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .._errors import ConfigError

__all__ = ["KEY_FILE", "SETTING", "Keyring", "SealedSecret", "UnknownKey", "key_id", "parse_keys",
           "write_key_file"]

SETTING = "WATCHKEEPER_SECRET_KEY"
KEY_FILE = "secret.key"
_NONCE = 12


class UnknownKey(ConfigError):
    """A sealed secret cannot be opened with the keys held: it was wrapped under another
    key (``key_id``), or it was altered. The message names the setting."""

    def __init__(self, message: str, key_id: str) -> None:
        super().__init__(message)
        self.key_id = key_id


@dataclass(frozen=True, slots=True)
class SealedSecret:
    """A secret as stored: ``sealed`` and ``data_key`` are nonce + ciphertext + tag."""

    sealed: bytes
    data_key: bytes
    key_id: str


def key_id(key: bytes) -> str:
    """The public name of a key: 16 hex digits of a SHA-256 of it (not reversible)."""
    return hashlib.sha256(b"watchkeeper secret key id\0" + key).hexdigest()[:16]


def _aad(tenant_id: str, endpoint: str) -> bytes:
    return f"watchkeeper webhook secret\0{tenant_id}\0{endpoint}".encode()


def _encrypt(key: bytes, plain: bytes, aad: bytes) -> bytes:
    nonce = secrets.token_bytes(_NONCE)
    return nonce + AESGCM(key).encrypt(nonce, plain, aad)


def _decrypt(key: bytes, box: bytes, aad: bytes) -> bytes:
    return AESGCM(key).decrypt(box[:_NONCE], box[_NONCE:], aad)


def parse_keys(text: str, where: str) -> list[bytes]:
    """The keys in ``text`` (comma-separated URL-safe base64 of 32 bytes each).

    Raises:
        ConfigError: naming ``where`` (the setting or the key file) and the fix.
    """
    keys = []
    for part in (p.strip() for p in text.split(",")):
        try:
            key = base64.urlsafe_b64decode(part.encode("ascii"))
        except (binascii.Error, ValueError, UnicodeEncodeError):
            key = b""
        if len(key) != 32:
            raise ConfigError(
                f"{where} does not hold a secret key: expected URL-safe base64 of 32 bytes "
                "(44 characters), comma-separated when there are several. Fix: set it to the "
                "key the webhook secrets were sealed with, or to a new one from `python -c "
                "'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())'` "
                "on a database with no sealed secret yet.")
        keys.append(key)
    return keys


class Keyring:
    """The key encryption keys this process holds: the first seals, all open.

    Args:
        keys: 32-byte keys, at least one.
        source: where they came from, for messages (the setting, or the key file).
        path: the key file, when they came from one: meeting a secret wrapped under a
            key it does not hold, the keyring reads the file again once (another
            process may have rotated the key).
    """

    def __init__(self, keys: list[bytes], *, source: str = SETTING, path: Path | None = None) -> None:
        if not keys or any(len(k) != 32 for k in keys):
            raise ValueError("a keyring holds one or more 32-byte keys")
        self._keys = {key_id(k): k for k in keys}
        self.current_id = key_id(keys[0])
        self.source, self.path = source, path

    @staticmethod
    def generate() -> str:
        """A new key as the setting takes it (URL-safe base64 of 32 random bytes)."""
        return base64.urlsafe_b64encode(AESGCM.generate_key(bit_length=256)).decode()

    @classmethod
    def load(cls, setting: str | None, home: Path) -> Keyring:
        """The keys of ``WATCHKEEPER_SECRET_KEY`` (``setting``) when set, else of the key
        file ``<home>/secret.key``, created (mode 0600, in a new file: never
        overwritten) with a new key when missing.

        Raises:
            ConfigError: the setting or the file holds no key, or the file cannot be read
                or created (each message names the setting and the fix).
        """
        if setting is not None and setting.strip():
            return cls(parse_keys(setting, SETTING), source=SETTING)
        path = home / KEY_FILE
        if not path.exists():
            _create_key_file(path)
        try:
            text = path.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read the secret key file {path} ({exc}). Fix: give this "
                              f"user read access to it, or set {SETTING}.") from exc
        where = f"the key file {path} (used as {SETTING} is unset)"
        return cls(parse_keys(text.strip(), where), source=where, path=path)

    def holds(self, wanted: str) -> bool:
        """Whether a key of id ``wanted`` is held (re-reading the key file once if not)."""
        if wanted in self._keys:
            return True
        if self.path is not None:
            try:
                fresh = parse_keys(self.path.read_text(encoding="ascii").strip(), self.source)
            except (OSError, UnicodeDecodeError, ConfigError):
                return False
            self._keys.update({key_id(k): k for k in fresh})
        return wanted in self._keys

    def seal(self, secret: str, tenant_id: str, endpoint: str) -> SealedSecret:
        """``secret`` sealed under a fresh data key, wrapped under the current key."""
        data_key, aad = AESGCM.generate_key(bit_length=256), _aad(tenant_id, endpoint)
        return SealedSecret(_encrypt(data_key, secret.encode(), aad),
                            _encrypt(self._keys[self.current_id], data_key, b"key\0" + aad),
                            self.current_id)

    def open(self, box: SealedSecret, tenant_id: str, endpoint: str) -> str:
        """The secret in ``box``.

        Raises:
            UnknownKey: wrapped under a key this keyring does not hold, or altered.
        """
        aad = _aad(tenant_id, endpoint)
        return _decrypt(self._unwrap(box, aad), box.sealed, aad).decode()

    def rewrap(self, box: SealedSecret, tenant_id: str, endpoint: str, to: Keyring) -> SealedSecret:
        """``box`` with its data key wrapped under ``to``'s current key instead (the
        sealed secret itself is unchanged, and checked to open).

        Raises:
            UnknownKey: as :meth:`open`.
        """
        aad = _aad(tenant_id, endpoint)
        data_key = self._unwrap(box, aad)
        _decrypt(data_key, box.sealed, aad)  # raises if the secret itself was altered
        return SealedSecret(box.sealed, _encrypt(to._keys[to.current_id], data_key, b"key\0" + aad),
                            to.current_id)

    def _unwrap(self, box: SealedSecret, aad: bytes) -> bytes:
        if not self.holds(box.key_id):
            raise UnknownKey(
                f"a webhook secret was sealed under key {box.key_id}, which {self.source} does "
                f"not hold (it holds {', '.join(sorted(self._keys))}). Fix: set {SETTING} to "
                "the key the secrets were sealed with (after `watchkeeper secrets rotate-key`, "
                "the new one; several may be given, comma-separated, the sealing one first).",
                box.key_id)
        try:
            return _decrypt(self._keys[box.key_id], box.data_key, b"key\0" + aad)
        except InvalidTag as exc:
            raise UnknownKey(f"a webhook secret sealed under key {box.key_id} does not open: "
                             "its row was altered or moved to another endpoint. Fix: issue a "
                             "new secret with `watchkeeper webhooks rotate`.", box.key_id) from exc


def _create_key_file(path: Path) -> None:
    """Write a new key to ``path``, created 0600 (O_EXCL: never over an existing file)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return  # another process made it first: read theirs
    except OSError as exc:
        raise ConfigError(f"cannot create the secret key file {path} ({exc}). Fix: make "
                          f"WATCHKEEPER_HOME writable, or set {SETTING}.") from exc
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(Keyring.generate() + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def write_key_file(path: Path, keys: str) -> None:
    """Replace the key file at ``path`` with ``keys`` atomically (a 0600 file renamed
    over it)."""
    fresh = path.with_name(path.name + ".new")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(keys + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(fresh, path)
