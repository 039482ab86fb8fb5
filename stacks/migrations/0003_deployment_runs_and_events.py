# Restructures DeploymentRun (one row per run of a stack in a region, from the index and/or
# the stream) and adds DeploymentEvent. The old rows were a pure mirror of index.json: they
# are dropped, and so are the EventIndex rows, so that the next sync downloads every index
# (and every stream) again instead of seeing unchanged ETags.

import django.db.models.deletion
from django.db import migrations, models


def forget_event_indexes(apps, schema_editor):
    apps.get_model("stacks", "EventIndex").objects.all().delete()


class Migration(migrations.Migration):

    dependencies = [
        ("stacks", "0002_operations_and_audit"),
    ]

    operations = [
        migrations.DeleteModel(name="DeploymentRun"),
        migrations.RunPython(forget_event_indexes, migrations.RunPython.noop),
        migrations.CreateModel(
            name="DeploymentRun",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("stack_name", models.CharField(max_length=1024)),
                ("region", models.CharField(max_length=64)),
                ("run_id", models.CharField(max_length=128)),
                ("command", models.CharField(blank=True, max_length=32)),
                ("cdkd_version", models.CharField(blank=True, max_length=64)),
                ("started_at_raw", models.CharField(blank=True, help_text="startedAt as written", max_length=64)),
                ("finished_at_raw", models.CharField(blank=True, help_text="finishedAt as written", max_length=64)),
                (
                    "started_at",
                    models.DateTimeField(blank=True, help_text="startedAt, when it is a valid time", null=True),
                ),
                (
                    "finished_at",
                    models.DateTimeField(blank=True, help_text="finishedAt, when it is a valid time", null=True),
                ),
                ("run_at", models.DateTimeField(blank=True, null=True)),
                ("result", models.CharField(blank=True, max_length=16)),
                ("event_count", models.IntegerField(default=0)),
                ("in_index", models.BooleanField(default=False, help_text="Listed in deployments/index.json")),
                ("stream_key", models.CharField(blank=True, max_length=1024)),
                (
                    "stream_etag",
                    models.CharField(blank=True, help_text="Empty when the stream is gone", max_length=128),
                ),
                ("has_stream", models.BooleanField(default=False)),
                ("synced_at", models.DateTimeField(blank=True, null=True)),
                (
                    "account",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deployment_runs",
                        to="stacks.account",
                    ),
                ),
                (
                    "index",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="runs",
                        to="stacks.eventindex",
                    ),
                ),
                (
                    "operation",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="deployment_runs",
                        to="stacks.operation",
                    ),
                ),
            ],
            options={
                "ordering": ["-run_id"],
                "indexes": [
                    models.Index(fields=["-run_at", "-run_id"], name="run_timeline"),
                    models.Index(fields=["account", "-run_at"], name="run_account_time"),
                    models.Index(fields=["account", "stack_name", "region"], name="run_stack"),
                    models.Index(fields=["command"], name="run_command"),
                    models.Index(fields=["result"], name="run_result"),
                    models.Index(fields=["operation"], name="run_operation"),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("account", "stack_name", "region", "run_id"), name="one_run_per_stack_region"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="DeploymentEvent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("seq", models.PositiveIntegerField()),
                ("timestamp_raw", models.CharField(blank=True, max_length=64)),
                ("timestamp", models.DateTimeField(blank=True, null=True)),
                ("event_type", models.CharField(blank=True, max_length=64)),
                (
                    "stack_name",
                    models.CharField(
                        blank=True, help_text="A nested child's events carry its name", max_length=1024
                    ),
                ),
                ("logical_id", models.CharField(blank=True, max_length=255)),
                ("resource_type", models.CharField(blank=True, max_length=255)),
                ("physical_id", models.CharField(blank=True, max_length=2048)),
                ("operation", models.CharField(blank=True, max_length=16)),
                ("provisioned_by", models.CharField(blank=True, max_length=16)),
                ("result", models.CharField(blank=True, max_length=16)),
                ("reason", models.TextField(blank=True)),
                ("duration_ms", models.BigIntegerField(blank=True, null=True)),
                ("error", models.JSONField(blank=True, null=True)),
                ("counts", models.JSONField(blank=True, null=True)),
                ("raw", models.JSONField(default=dict)),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="events", to="stacks.deploymentrun"
                    ),
                ),
            ],
            options={
                "ordering": ["run", "seq"],
                "indexes": [
                    models.Index(fields=["event_type", "run"], name="event_type_run"),
                    models.Index(fields=["logical_id"], name="event_logical_id"),
                ],
                "constraints": [models.UniqueConstraint(fields=("run", "seq"), name="one_event_per_seq")],
            },
        ),
    ]
