"""Record bodies at rest: the database holds Fernet tokens, every reader gets the bytes.

A state record holds whatever cdkd resolved (properties, attributes, outputs, orphans), so
a plaintext copy in PostgreSQL would put every secret of every account into each backup
and replica. `EncryptedBinaryField` encrypts on the way in (`get_prep_value`) and decrypts
on the way out (`from_db_value`) with a MultiFernet built from `CDKD_ENCRYPTION_KEYS`: the
first key encrypts, every key decrypts, so a new key goes in front and the old one stays
until `manage.py cdkd encryption rotate` has re-encrypted every row with the new one.

Fernet is AES-128-CBC with an HMAC-SHA256 over the whole token: a wrong key or an edited
column is refused (`EncryptionKeyError`), never decrypted into garbage. A token is not
deterministic, so an encrypted column cannot be searched or compared in SQL; only
`isnull` lookups are allowed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models, transaction

BATCH = 200


class EncryptionKeyError(ImproperlyConfigured):
    """A stored token that no key of CDKD_ENCRYPTION_KEYS opens (or that was altered)."""


@lru_cache(maxsize=8)
def _keyring(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(k) for k in keys])


def keyring() -> MultiFernet:
    """The MultiFernet of the current settings (cached per key list, so a test that switches
    the settings gets the new keys)."""
    keys = tuple(settings.CDKD_ENCRYPTION_KEYS)
    if not keys:
        raise ImproperlyConfigured("CDKD_ENCRYPTION_KEYS is empty: no key to encrypt record bodies with")
    return _keyring(keys)


@lru_cache(maxsize=8)
def _fernet(key: str) -> Fernet:
    return Fernet(key)


def primary() -> Fernet:
    """The key that encrypts: the first of the list."""
    return _fernet(settings.CDKD_ENCRYPTION_KEYS[0])


def encrypt(data: bytes) -> bytes:
    return keyring().encrypt(bytes(data))


def decrypt(token: bytes) -> bytes:
    try:
        return keyring().decrypt(bytes(token))
    except InvalidToken:
        raise EncryptionKeyError(
            "A record body in the database cannot be decrypted with any key of CDKD_ENCRYPTION_KEYS: "
            "the key it was encrypted with is not in the list (removed before `manage.py cdkd encryption "
            "rotate` ran, or a different key is set), or the column was altered"
        ) from None


class EncryptedBinaryField(models.BinaryField):
    """A BinaryField whose column holds a Fernet token of the bytes, never the bytes."""

    description = "Bytes, stored encrypted (a Fernet token)"

    def to_bytes(self, value) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"{self.name} holds bytes, not {type(value).__name__}")
        return bytes(value)

    def from_bytes(self, data: bytes):
        return data

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if value is None:
            return None
        return encrypt(self.to_bytes(value))

    def from_db_value(self, value, expression, connection):
        if value is None:
            return None
        return self.from_bytes(decrypt(bytes(value)))

    def get_lookup(self, lookup_name):
        # `body=...` would compare against a fresh random token and never match: refuse it.
        return super().get_lookup(lookup_name) if lookup_name == "isnull" else None


class EncryptedTextField(EncryptedBinaryField):
    """Text (UTF-8) stored as a Fernet token."""

    description = "Text, stored encrypted (a Fernet token)"

    def to_bytes(self, value) -> bytes:
        if isinstance(value, bytes):  # Django's schema editor's default for a bytea column: b""
            return value
        if not isinstance(value, str):
            raise TypeError(f"{self.name} holds text, not {type(value).__name__}")
        return value.encode("utf-8", "surrogatepass")

    def from_bytes(self, data: bytes) -> str:
        return data.decode("utf-8", "surrogatepass")

    def get_default(self):
        return "" if not self.has_default() and not self.null else super().get_default()

    def to_python(self, value):
        return value

    def value_to_string(self, obj):
        return self.value_from_object(obj)


def json_bytes(value) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def json_value(data: bytes):
    return json.loads(data.decode("utf-8", "surrogatepass"))


class EncryptedJSONField(EncryptedBinaryField):
    """A JSON value stored as a Fernet token of its JSON text. SQL NULL is None when the
    field is nullable; there are no JSON lookups (the database cannot see inside)."""

    description = "A JSON value, stored encrypted (a Fernet token)"

    def to_bytes(self, value) -> bytes:
        return json_bytes(value)

    def from_bytes(self, data: bytes):
        return json_value(data)

    def get_prep_value(self, value):
        if value is None and not self.null:
            return encrypt(self.to_bytes(None))
        return super().get_prep_value(value)

    def to_python(self, value):
        return value

    def value_to_string(self, obj):
        return self.value_from_object(obj)


# --- re-writing whole columns (the data migration, key rotation) ------------------------


class Unreadable(Exception):
    """Raised by a transform for a value it cannot open; the row is counted and left alone."""


@dataclass
class ColumnCounts:
    table: str
    column: str
    rows: int = 0
    rewritten: int = 0
    unchanged: int = 0
    # Written by someone else between our read and our write: left as they wrote it.
    changed_meanwhile: int = 0
    unreadable: list = field(default_factory=list)

    def as_json(self) -> dict:
        return {
            "table": self.table,
            "column": self.column,
            "rows": self.rows,
            "rewritten": self.rewritten,
            "unchanged": self.unchanged,
            "changedMeanwhile": self.changed_meanwhile,
            "unreadable": self.unreadable,
        }


def rewrite_column(
    connection,
    table: str,
    pk: str,
    column: str,
    transform: Callable[[bytes], bytes | None],
    *,
    batch_size: int = BATCH,
    progress: Callable[[ColumnCounts], None] | None = None,
) -> ColumnCounts:
    """Pass every non-null value of `table.column` through `transform` (None: keep it), in
    batches of primary keys, one transaction a batch. Raw SQL on purpose: the migration and
    the rotation handle the stored bytes, not what the field would make of them. A row is
    only written if it still holds what was read (a sync may run at the same time)."""
    counts = ColumnCounts(table, column)
    q = connection.ops.quote_name
    first = f"SELECT {q(pk)}, {q(column)} FROM {q(table)} ORDER BY {q(pk)} LIMIT %s"
    after = f"SELECT {q(pk)}, {q(column)} FROM {q(table)} WHERE {q(pk)} > %s ORDER BY {q(pk)} LIMIT %s"
    update = f"UPDATE {q(table)} SET {q(column)} = %s WHERE {q(pk)} = %s AND {q(column)} = %s"
    last = None
    while True:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            if last is None:
                cursor.execute(first, [batch_size])
            else:
                cursor.execute(after, [last, batch_size])
            rows = cursor.fetchall()
            if not rows:
                return counts
            for row_pk, value in rows:
                last = row_pk
                counts.rows += 1
                if value is None:
                    counts.unchanged += 1
                    continue
                old = bytes(value)
                try:
                    new = transform(old)
                except Unreadable:
                    counts.unreadable.append(row_pk)
                    continue
                if new is None:
                    counts.unchanged += 1
                    continue
                cursor.execute(update, [connection.Database.Binary(new), row_pk, connection.Database.Binary(old)])
                if cursor.rowcount == 1:
                    counts.rewritten += 1
                else:
                    counts.changed_meanwhile += 1
        if progress:
            progress(counts)


def encrypted_columns() -> list[tuple[str, str, str]]:
    """(table, pk column, column) of every EncryptedBinaryField of the installed models."""
    out = []
    for model in apps.get_models():
        for f in model._meta.concrete_fields:
            if isinstance(f, EncryptedBinaryField):
                out.append((model._meta.db_table, model._meta.pk.column, f.column))
    return out


def _rotate_token(token: bytes) -> bytes | None:
    try:
        primary().decrypt(token)
        return None  # already under the first key
    except InvalidToken:
        pass
    try:
        return keyring().rotate(token)
    except InvalidToken:
        raise Unreadable from None


def rotate(*, batch_size: int = BATCH, progress: Callable[[ColumnCounts], None] | None = None) -> list[ColumnCounts]:
    """Re-encrypt every encrypted column with the first key (MultiFernet.rotate keeps each
    token's timestamp). Rows already under the first key are left alone, so a rotation that
    stopped half-way is finished by running it again."""
    from django.db import connection

    return [
        rewrite_column(connection, table, pk, column, _rotate_token, batch_size=batch_size, progress=progress)
        for table, pk, column in encrypted_columns()
    ]
