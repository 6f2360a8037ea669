"""The built-in fast-path rules, registered on import (see
:mod:`avalanche_tmc.tangent.registry`), one module per family of layers:

* :mod:`.conv_linear`: convolutions and linear layers;
* :mod:`.normalization`: BatchNorm on running statistics, LayerNorm, convolution + BatchNorm;
* :mod:`.activations`: ReLU, ReLU6/Hardtanh, SiLU, GELU, Sigmoid, Tanh, Hardswish, Hardsigmoid;
* :mod:`.pooling`: max pooling;
* :mod:`.shapes`: shapes and views, sums, average pooling, dropout, identity, ``cat``, conversions
  (the operations linear in their input); no-tangent ops;
* :mod:`.arithmetic`: ``+ - * /`` and matrix products;
* :mod:`.attention`: softmax and scaled dot-product attention.

A new rule goes into the module of its family (or a new one imported here).

The underscore-prefixed modules register nothing: they hold what the rules above share
(:mod:`._dense`: the linear layers' tangent; :mod:`._layernorm`: LayerNorm's tangent in its
own kernels; :mod:`._pairs`: primal and tangent side by side in one buffer at inference).
"""

from . import activations, arithmetic, attention, conv_linear, normalization, pooling, shapes  # noqa: F401

__all__ = ["activations", "arithmetic", "attention", "conv_linear", "normalization", "pooling", "shapes"]
