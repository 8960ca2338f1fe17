"""The package's version, in a module of its own so that any layer can name it without importing ``asap``'s
facade (``asap/__init__.py``, which sits above every layer)."""

__version__ = "0.1.0"
