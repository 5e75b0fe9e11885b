from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from deadletters.dashboard import dashboard
from deadletters.views import favicon
from jobqueue.metrics import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("deadletters/", include("deadletters.urls")),
    # The JSON API (the optional extra redrive[api]) and its OpenAPI document, api/openapi.json.
    path("api/", include("deadletters.api.urls")),
    path("metrics", metrics, name="metrics"),
    path("", dashboard, name="dashboard"),
    # Browsers ask for /favicon.ico on pages that link no icon (the admin's, a 404's).
    path("favicon.ico", favicon),
]

# Errors outside the console's own views (an unknown URL, a refusal in the admin) in the
# console's layout too, saying why and where to go.
handler403 = "deadletters.views.permission_denied"
handler404 = "deadletters.views.page_not_found"
