"""Settings of the test project: its database comes from $SHOP_DSN (a libpq conninfo)."""
import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ["SHOP_DSN"])

SECRET_KEY = "test-only"  # noqa: S105
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "pgqueue.contrib.django", "shop"]
DATABASES = {"default": {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": _db.get("dbname", ""), "USER": _db.get("user", ""),
    "PASSWORD": _db.get("password", ""), "HOST": _db.get("host", ""),
    "PORT": _db.get("port", ""),
}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "shop.urls"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
# Which Django database pgqueue uses (the default: "default"); $PGQUEUE_DSN wins when set.
PGQUEUE_DATABASE = "default"
