from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0010_rejected_spans"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
