"""The share site, under `/s/TOKEN/`: the dashboard's own paths that a link may reach.

Nothing else is routed here: the list, the admin, the API and other conversations are
not reachable with a share token (tests/sharing/test_share.py holds the table).
"""

from django.urls import path, re_path

from conversations.dashboard import share_pages

urlpatterns = [
    path("", share_pages.page, name="share"),
    path("replay.json", share_pages.replay_download, name="share-replay-download"),
    # The dashboard's paths, as `reverse` builds them under the share prefix.
    path("c/<uuid:conversation_id>/", share_pages.page),
    path("c/<uuid:conversation_id>/messages", share_pages.earlier_messages),
    path("c/<uuid:conversation_id>/replay.json", share_pages.replay_download),
    path("c/<uuid:conversation_id>/find", share_pages.find),
    path("c/<uuid:conversation_id>/m/<int:seq>/b/<int:block>/image", share_pages.block_image),
    path("c/<uuid:conversation_id>/m/<int:seq>/b/<int:block>/text", share_pages.block_text),
    path("c/<uuid:conversation_id>/m/<int:seq>/wire", share_pages.wire_text),
    path("c/<uuid:conversation_id>/m/<int:seq>/blocks", share_pages.message_blocks),
    path("c/<uuid:conversation_id>/m/<int:seq>/projection.json", share_pages.message_projection),
    # Any other path, a malformed id among them: a 404 that still carries the share headers.
    re_path(r"^.*$", share_pages.not_here),
]
