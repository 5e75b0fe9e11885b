"""A host project without django.contrib.admin: Django's sign-in pages beside the console, both
mounted as the README's install steps mount them."""

from django.urls import include, path

urlpatterns = [
    path("accounts/", include("django.contrib.auth.urls")),
    path("ops/", include("deadletters.urls")),
]
