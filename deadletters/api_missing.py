"""Stands in for the API's URLconf (`deadletters.api.urls`) when its extra, `redrive[api]`
(django-ninja), is not installed.

The console's app config puts this module in `sys.modules` under the API's URLconf's name
when django-ninja cannot be found (deadletters.apps), so a project that mounts the API with
`include("deadletters.api.urls")` but lacks the extra still loads its URLconf: `manage.py
check` can then say what is missing (redrive.E037, deadletters.checks.api_extra) instead of
every command stopping on a bare ModuleNotFoundError, and each request under the API's prefix
answers 503 naming the extra rather than a 404 that hides it. With django-ninja installed this
module is never used.
"""

from django.http import JsonResponse
from django.urls import re_path
from django.views.decorators.csrf import csrf_exempt

URLCONF = "deadletters.api.urls"
EXTRA = "redrive[api]"
MESSAGE = f"The JSON API needs django-ninja, which is not installed: pip install '{EXTRA}'."

# The namespace the real URLconf mounts under (deadletters.api.core's urls_namespace).
app_name = "redrive-api"


@csrf_exempt
def unavailable(request, rest=""):
    return JsonResponse({"detail": MESSAGE}, status=503)


urlpatterns = [re_path(r"^(?P<rest>.*)$", unavailable, name="unavailable")]
