"""``python manage.py saga …``: the ``saga-worker`` commands as one Django management command."""
