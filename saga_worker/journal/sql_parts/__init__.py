"""The SQL journal's parts by area, each with its statements beside it (composed in ``sql.py``)."""
