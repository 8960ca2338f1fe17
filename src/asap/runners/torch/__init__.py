"""The reference trainer: the torch backend of ``asap run`` and ``asap tune`` (torchrun workers)."""
