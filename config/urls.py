from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from deadletters.dashboard import dashboard
from jobqueue.metrics import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("deadletters/", include("deadletters.urls")),
    path("metrics", metrics, name="metrics"),
    path("", dashboard, name="dashboard"),
]
