"""Finding and replacing a network's classification layer (its head).

What it is for: :class:`~avalanche_tmc.tangent.TangentModel` gives a pre-trained network a
new head of the right size (``num_classes``) and can linearize only the head; both need
to know which ``nn.Linear`` produces the logits, found by tracing the network.

This module imports torch only.
"""

from typing import Optional, Tuple

import torch
from torch import nn

__all__ = ["find_head", "replace_head"]


_PASSTHROUGH_MODULES = (nn.Dropout, nn.AlphaDropout, nn.Identity, nn.Flatten)
_SHAPE_OPS = {"flatten", "view", "reshape", "contiguous", "squeeze", "float", "to", "clone", "dropout"}
_SCALAR_OPS = {"mul", "truediv", "div", "add", "sub", "neg"}


def _output_layer(model: nn.Module) -> Tuple[Optional[str], str]:
    """(name of the nn.Linear producing the output, "") or (None, why not), by tracing
    ``model`` with ``torch.fx`` (no input needed) and walking back from its output through
    shape and scalar operations (flatten, dropout, ``* scale``, ...)."""
    import torch.fx

    # Tracing runs the Python of every forward: in training mode BatchNorm counts a batch
    # (num_batches_tracked += 1) even under torch.fx, which would change the base point.
    was_training = model.training
    model.eval()
    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception as error:  # noqa: BLE001  (any tracing failure: the model is not traceable)
        return None, f"the model cannot be traced by torch.fx ({type(error).__name__})"
    finally:
        model.train(was_training)
    node = next(n for n in graph.nodes if n.op == "output").args[0]
    while True:
        if not isinstance(node, torch.fx.Node):
            return None, "the model does not return one tensor"
        if node.op == "call_module":
            module = model.get_submodule(node.target)
            if isinstance(module, nn.Linear):
                return str(node.target), ""
            if not isinstance(module, _PASSTHROUGH_MODULES):
                return None, f"the output is produced by {node.target!r} ({type(module).__name__}), not an nn.Linear"
        elif node.op in ("call_function", "call_method"):
            name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
            if name in _SHAPE_OPS and node.args:  # the tensor is the first argument, the rest is shape
                node = node.args[0]
                continue
            if name not in _SCALAR_OPS:
                return None, f"the output is produced by {name or node.target!r}, not an nn.Linear"
        else:
            return None, f"the output is produced by {node.op} {node.target!r}, not an nn.Linear"
        inputs = [a for a in (*node.args, *node.kwargs.values()) if isinstance(a, torch.fx.Node)]
        if len(inputs) != 1:
            return None, f"the output combines several tensors at {node.name!r}"
        node = inputs[0]


def find_head(model: nn.Module) -> str:
    """Name of the classification layer of ``model``: the ``nn.Linear`` whose output is
    the model's output (found by tracing the model with ``torch.fx``, no input needed).

    That is ``fc`` for torchvision ResNets, ``classifier.1`` for EfficientNets,
    ``heads.head`` for torchvision ViTs, ``classifier`` / ``head`` for timm models. When
    the model cannot be traced, its only ``nn.Linear`` is taken; with several, the head
    is ambiguous and a ``ValueError`` asks for ``head='<module name>'``.
    """
    linear_names = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    if not linear_names:
        raise ValueError(
            "Could not find a classification head: the model has no nn.Linear layer. "
            "Pass head='<module name>' naming the layer that produces the logits."
        )
    name, why = _output_layer(model)
    if name is not None:
        return name
    if len(linear_names) == 1 and "cannot be traced" in why:
        return linear_names[0]
    raise ValueError(
        f"Could not find the classification head of {type(model).__name__}: {why}. Pass head='<module name>' "
        f"naming the nn.Linear that produces the logits (nn.Linear layers: {linear_names[:8]}"
        f"{' ...' if len(linear_names) > 8 else ''}), or replace the head yourself and leave num_classes unset."
    )


def _set_submodule(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


def replace_head(model: nn.Module, num_classes: int, head: Optional[str] = None, seed: int = 0) -> nn.Module:
    """Replace the classification layer of ``model`` (in place) by a new ``nn.Linear``
    with ``num_classes`` outputs, initialised from ``seed``; returns ``model``.

    The seeded initialisation gives every process that builds the same model the same
    base point ``w``, so components trained apart can still be composed, and lets
    baselines start from exactly the head the tangent models start from.
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive int (the size of the new head), got {num_classes!r}.")
    explicit = head is not None
    if not explicit:
        head = find_head(model)
    try:
        old = model.get_submodule(head)
    except AttributeError:
        raise ValueError(f"head={head!r} names no module of {type(model).__name__}.") from None
    output = _output_layer(model)[0] if explicit else head
    if output is not None and output != head:
        raise ValueError(
            f"head={head!r} does not produce the model's output ({output!r} does): a new {num_classes}-way "
            f"{head!r} would not give {num_classes} outputs. Pass head={output!r}, or leave head unset."
        )
    if not isinstance(old, nn.Linear):
        raise TypeError(
            f"The head to replace must be an nn.Linear, got {type(old).__name__}. "
            "Pass head='<name of the final nn.Linear>' or replace the head yourself."
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        new = nn.Linear(old.in_features, num_classes, bias=old.bias is not None)
    _set_submodule(model, head, new.to(device=old.weight.device, dtype=old.weight.dtype))
    return model


