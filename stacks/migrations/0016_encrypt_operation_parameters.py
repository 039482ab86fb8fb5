"""A deploy's template parameters move out of the clear `Operation.params` into
`Operation.secret_params`, encrypted at rest (stacks.crypto) like record bodies: a template
parameter may be a password, and `params` is a plain jsonb column in every backup.

Existing deploy rows are moved (forward) and moved back (reverse); no other kind has secret
parameters."""

from django.db import migrations

import stacks.crypto

BATCH = 500
KINDS = {"deploy": ("parameters",)}  # the specs' `secret_params` when this migration was written


def _batches(apps, schema_editor):
    Operation = apps.get_model("stacks", "Operation")
    manager = Operation.objects.using(schema_editor.connection.alias).filter(kind__in=list(KINDS))
    last = 0
    while rows := list(manager.filter(pk__gt=last).order_by("pk")[:BATCH]):
        last = rows[-1].pk
        yield manager, rows


def seal(apps, schema_editor):
    for manager, rows in _batches(apps, schema_editor):
        changed = []
        for op in rows:
            params = dict(op.params or {})
            secret = {k: params.pop(k) for k in KINDS[op.kind] if k in params}
            if secret:
                op.params, op.secret_params = params, {**(op.secret_params or {}), **secret}
                changed.append(op)
        manager.bulk_update(changed, ["params", "secret_params"])


def unseal(apps, schema_editor):
    for manager, rows in _batches(apps, schema_editor):
        for op in rows:
            op.params = {**(op.params or {}), **(op.secret_params or {})}
            op.secret_params = {}
        manager.bulk_update(rows, ["params", "secret_params"])


class Migration(migrations.Migration):
    dependencies = [
        ("stacks", "0015_stack_journal"),
    ]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="secret_params",
            field=stacks.crypto.EncryptedJSONField(blank=True, default=dict),
        ),
        migrations.RunPython(seal, unseal),
    ]
