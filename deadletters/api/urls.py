"""The API's URLconf: `path("api/", include("deadletters.api.urls"))` mounts every endpoint,
the OpenAPI document (`openapi.json`) and its browsable docs (`docs`)."""

from .endpoints import api

urlpatterns, _, app_name = api.urls
