from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from replaysite import assets

urlpatterns = [
    path("favicon.ico", assets.favicon, name="favicon"),
    path("", include("conversations.dashboard.urls")),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("", include("conversations.api.urls")),
    path("s/<str:token>/", include("conversations.dashboard.share_urls")),
]

handler400 = "replaysite.errors.bad_request"
handler403 = "replaysite.errors.forbidden"
handler404 = "replaysite.errors.not_found"
handler500 = "replaysite.errors.server_error"
