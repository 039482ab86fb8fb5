"""Encrypt the mirrored record and lock bodies at rest (stacks.crypto), and back.

The rows are re-written before the fields change (forward) and after they change back
(reverse), with raw SQL on the stored bytes, so neither direction reads a column through a
field that expects the other form."""

from django.db import migrations

import stacks.crypto


def _columns(apps):
    for name in ("Stack", "Lock"):
        model = apps.get_model("stacks", name)
        yield model._meta.db_table, model._meta.pk.column, model._meta.get_field("body").column


def encrypt_rows(apps, schema_editor):
    for table, pk, column in _columns(apps):
        stacks.crypto.rewrite_column(schema_editor.connection, table, pk, column, stacks.crypto.encrypt)


def decrypt_rows(apps, schema_editor):
    for table, pk, column in _columns(apps):
        stacks.crypto.rewrite_column(schema_editor.connection, table, pk, column, stacks.crypto.decrypt)


class Migration(migrations.Migration):
    dependencies = [
        ("stacks", "0007_account_bucket_checked_at"),
    ]

    operations = [
        migrations.RunPython(encrypt_rows, decrypt_rows),
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
    ]
