from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("stacks", "0010_encrypt_bodies"),
    ]

    operations = [
        migrations.AddField(
            model_name="membership",
            name="can_reveal",
            field=models.BooleanField(default=False),
        ),
    ]
