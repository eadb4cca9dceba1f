"""The memory journal's parts by area (composed in ``memory.py``)."""
