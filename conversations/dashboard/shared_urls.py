"""The share site, under `/s/TOKEN/`: the dashboard's own paths that a link may reach.

Nothing else is routed here: the list, the admin, the API and other conversations are
not reachable with a share token (tests/test_share.py holds the table).
"""

from django.urls import path, re_path

from conversations.dashboard import shared

urlpatterns = [
    path("", shared.page, name="share"),
    path("replay.json", shared.replay_download, name="share-replay-download"),
    # The dashboard's paths, as `reverse` builds them under the share prefix.
    path("c/<str:conversation_id>/", shared.page),
    path("c/<str:conversation_id>/messages", shared.earlier_messages),
    path("c/<str:conversation_id>/replay.json", shared.replay_download),
    path("c/<str:conversation_id>/find", shared.find),
    path("c/<str:conversation_id>/m/<int:seq>/b/<int:block>/image", shared.block_image),
    path("c/<str:conversation_id>/m/<int:seq>/b/<int:block>/text", shared.block_text),
    path("c/<str:conversation_id>/m/<int:seq>/wire", shared.wire_text),
    path("c/<str:conversation_id>/m/<int:seq>/projection.json", shared.message_projection),
    re_path(r"^.*$", shared.not_here),  # a 404 that still carries the share headers
]
