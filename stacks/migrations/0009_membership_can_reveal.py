from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("stacks", "0007_account_bucket_checked_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="membership",
            name="can_reveal",
            field=models.BooleanField(default=False),
        ),
    ]
