import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("stacks", "0012_deploy_plans"),
    ]

    operations = [
        migrations.AddField(
            model_name="operation",
            name="reason",
            field=models.CharField(blank=True, max_length=500),
        ),
        migrations.AddField(
            model_name="operation",
            name="rerun_of",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="reruns",
                to="stacks.operation",
            ),
        ),
    ]
