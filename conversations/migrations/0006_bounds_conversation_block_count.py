"""Conversation.block_count: the page's block total, kept by the services (docs/contract.md §4 Bounds)."""

from typing import Any

from django.db import migrations, models
from django.db.models import OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce


def backfill(apps: Any, schema_editor: Any) -> None:
    conversation = apps.get_model("conversations", "Conversation")
    message = apps.get_model("conversations", "Message")
    total = (
        message.objects.filter(conversation=OuterRef("pk"))
        .values("conversation")
        .annotate(n=Sum("block_count"))
        .values("n")
    )
    conversation.objects.update(block_count=Coalesce(Subquery(total), 0))


class Migration(migrations.Migration):
    dependencies = [("conversations", "0005_search_entries")]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="block_count",
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
