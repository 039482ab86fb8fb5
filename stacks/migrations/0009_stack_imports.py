from django.db import migrations, models


def backfill(apps, schema_editor):
    """Fill `imports` from the mirrored bodies, so destroy's preview needs no S3 read and no
    body parse for records that have not changed since. A body that is not JSON here stays
    null: the check then reads that row's body through the model (stacks.consumers)."""
    from engine.schema import parse_state
    from stacks.consumers import UNREADABLE, mirror_imports

    Stack = apps.get_model("stacks", "Stack")
    for pk, body in Stack.objects.filter(imports__isnull=True).values_list("pk", "body").iterator(chunk_size=500):
        value = mirror_imports(parse_state(bytes(body or b"")))
        if value != UNREADABLE:
            Stack.objects.filter(pk=pk).update(imports=value)


class Migration(migrations.Migration):
    dependencies = [
        ("stacks", "0008_audit_event_operation_kind"),
    ]

    operations = [
        migrations.AddField(
            model_name="stack",
            name="imports",
            field=models.JSONField(
                blank=True,
                help_text="The record's imports entries, or why they cannot be read; null = not mirrored yet",
                null=True,
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
