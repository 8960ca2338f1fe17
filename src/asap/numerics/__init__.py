"""Precision alignment: capture a training step's per-module numerics in the reference trainer
(``asap.numerics.capture``) and compare two runs operator by operator and loss by loss (``asap.numerics.align``)."""
