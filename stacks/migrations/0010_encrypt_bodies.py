"""Encrypt at rest what the mirror copies from bucket bodies (stacks.crypto), and back:
record and lock bodies, and each deployment event's line and free text.

Bodies keep their bytea column: their rows are re-written before the fields change
(forward) and after they change back (reverse), with raw SQL on the stored bytes. The
event columns change type (jsonb and text to bytea), so they are copied through new
columns that take the old names."""

from django.db import migrations, models

import stacks.crypto

BATCH = 500
EVENT_FIELDS = ("reason", "error", "raw")


def _body_columns(apps):
    for name in ("Stack", "Lock"):
        model = apps.get_model("stacks", name)
        yield model._meta.db_table, model._meta.pk.column, model._meta.get_field("body").column


def encrypt_bodies(apps, schema_editor):
    for table, pk, column in _body_columns(apps):
        stacks.crypto.rewrite_column(schema_editor.connection, table, pk, column, stacks.crypto.encrypt)


def decrypt_bodies(apps, schema_editor):
    for table, pk, column in _body_columns(apps):
        stacks.crypto.rewrite_column(schema_editor.connection, table, pk, column, stacks.crypto.decrypt)


def _event_batches(apps, schema_editor):
    Event = apps.get_model("stacks", "DeploymentEvent")
    manager = Event.objects.using(schema_editor.connection.alias)
    last = 0
    while rows := list(manager.filter(pk__gt=last).order_by("pk")[:BATCH]):
        last = rows[-1].pk
        yield manager, rows


def seal_events(apps, schema_editor):
    encrypt, dump = stacks.crypto.encrypt, stacks.crypto.json_bytes
    for manager, rows in _event_batches(apps, schema_editor):
        for e in rows:
            e.sealed_reason = encrypt(e.reason.encode("utf-8", "surrogatepass"))
            e.sealed_error = None if e.error is None else encrypt(dump(e.error))
            e.sealed_raw = encrypt(dump(e.raw))
        manager.bulk_update(rows, [f"sealed_{f}" for f in EVENT_FIELDS])


def unseal_events(apps, schema_editor):
    decrypt, load = stacks.crypto.decrypt, stacks.crypto.json_value
    for manager, rows in _event_batches(apps, schema_editor):
        for e in rows:
            e.reason = (
                decrypt(bytes(e.sealed_reason)).decode("utf-8", "surrogatepass") if e.sealed_reason is not None else ""
            )
            e.error = None if e.sealed_error is None else load(decrypt(bytes(e.sealed_error)))
            e.raw = {} if e.sealed_raw is None else load(decrypt(bytes(e.sealed_raw)))
        manager.bulk_update(rows, list(EVENT_FIELDS))


class Migration(migrations.Migration):
    dependencies = [
        ("stacks", "0009_stack_imports"),
    ]

    operations = [
        migrations.RunPython(encrypt_bodies, decrypt_bodies),
        migrations.AlterField(
            model_name="lock",
            name="body",
            field=stacks.crypto.EncryptedBinaryField(),
        ),
        migrations.AlterField(
            model_name="stack",
            name="body",
            field=stacks.crypto.EncryptedBinaryField(help_text="The stored bytes, verbatim (encrypted at rest)"),
        ),
        *[
            migrations.AddField(model_name="deploymentevent", name=f"sealed_{f}", field=models.BinaryField(null=True))
            for f in EVENT_FIELDS
        ],
        migrations.RunPython(seal_events, unseal_events),
        *[migrations.RemoveField(model_name="deploymentevent", name=f) for f in EVENT_FIELDS],
        *[
            migrations.RenameField(model_name="deploymentevent", old_name=f"sealed_{f}", new_name=f)
            for f in EVENT_FIELDS
        ],
        migrations.AlterField(
            model_name="deploymentevent",
            name="reason",
            field=stacks.crypto.EncryptedTextField(blank=True),
        ),
        migrations.AlterField(
            model_name="deploymentevent",
            name="error",
            field=stacks.crypto.EncryptedJSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="deploymentevent",
            name="raw",
            field=stacks.crypto.EncryptedJSONField(default=dict),
        ),
    ]
