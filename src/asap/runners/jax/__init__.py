"""Real training runs on JAX device meshes (GSPMD): the ``jax`` backend of ``asap run`` and ``asap tune``."""
