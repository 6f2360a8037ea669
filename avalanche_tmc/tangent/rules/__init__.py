"""The built-in fast-path rules, registered on import (see
:mod:`avalanche_tmc.tangent.registry`), one module per family of layers:

* :mod:`.linear`: convolutions and linear layers (:mod:`.dense`: the linear layers' tangent);
* :mod:`.normalization`: BatchNorm on running statistics, LayerNorm, convolution + BatchNorm;
* :mod:`.activations`: ReLU, ReLU6/Hardtanh, SiLU, GELU, Sigmoid, Tanh, Hardswish, Hardsigmoid;
* :mod:`.pooling`: max pooling;
* :mod:`.linear_ops`: shapes, sums, average pooling, dropout, identity, ``cat``; no-tangent ops;
* :mod:`.arithmetic`: ``+ - * /`` and matrix products;
* :mod:`.attention`: softmax and scaled dot-product attention.

A new rule goes into the module of its family (or a new one imported here).
"""

from . import activations, arithmetic, attention, dense, linear, linear_ops, normalization, pooling  # noqa: F401

__all__ = ["activations", "arithmetic", "attention", "dense", "linear", "linear_ops", "normalization", "pooling"]
