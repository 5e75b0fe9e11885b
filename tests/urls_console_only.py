"""A host project's urls that know nothing of Redrive but the console, at a prefix of its own."""

from django.urls import include, path

urlpatterns = [path("ops/jobs/", include("deadletters.urls"))]
