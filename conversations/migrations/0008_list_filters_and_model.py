"""The list's filters and model column: Conversation.error_count, .unanswered_calls and
.model, kept by the services from now on, with a partial index per filter in the list's
order. The conversations stored before are backfilled by 0009, outside this migration's
transaction, so that the table is not locked for the whole backfill.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("conversations", "0007_share_share_links")]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="error_count",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name="conversation",
            name="model",
            field=models.CharField(blank=True, default="", editable=False, max_length=200),
        ),
        migrations.AddField(
            model_name="conversation",
            name="unanswered_calls",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(
                condition=models.Q(("error_count__gt", 0)),
                fields=["-updated_at", "-created_at", "id"],
                name="conversation_has_errors",
            ),
        ),
        migrations.AddIndex(
            model_name="conversation",
            index=models.Index(
                condition=models.Q(("unanswered_calls__gt", 0)),
                fields=["-updated_at", "-created_at", "id"],
                name="conversation_unanswered",
            ),
        ),
    ]
