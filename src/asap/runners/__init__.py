"""The runners: real training runs of a strategy on this machine's devices.

``torch`` is the reference trainer (torchrun workers, PyTorch's own distributed APIs), ``jax`` the same model on a
named JAX device mesh (one child process owning the devices); ``common`` holds what both share (the launch of a
logged child process, its result and its failure).
"""
