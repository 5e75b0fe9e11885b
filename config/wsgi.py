import os

from django.core.wsgi import get_wsgi_application

from config import secret_key

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# The web app runs no system checks: refuse here to serve without a SECRET_KEY.
secret_key.require()
application = get_wsgi_application()
