"""Delivery: ring -> window -> stream -> sink. The hub copies each new ring record once into
its window and hands each stream's due bytes to its sink (hub.py says how)."""
