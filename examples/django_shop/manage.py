#!/usr/bin/env python
"""An example Django project on pgqueue (tests/integration/contrib/test_django.py runs it):

    SHOP_DSN="dbname=shop" python manage.py migrate
    SHOP_DSN="dbname=shop" python manage.py pgqueue db upgrade
    SHOP_DSN="dbname=shop" python manage.py shell -c "from shop.jobs import place_order; place_order(1)"
    SHOP_DSN="dbname=shop" python manage.py pgqueue worker --app shop.jobs:app
"""
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
