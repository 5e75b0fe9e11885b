import os

from django.core.asgi import get_asgi_application

from config import secret_key

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# The web app runs no system checks: refuse here to serve without a SECRET_KEY.
secret_key.require()
application = get_asgi_application()
