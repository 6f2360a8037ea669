"""Tracing a network into a ``torch.fx`` graph for the fast path.

What it is for: :func:`trace_network` turns a network into the graph that
:func:`~avalanche_tmc.tangent.plan.build_plan` compiles. Modules that have a registered
rule stay whole (one graph node each); a submodule whose forward ``torch.fx`` cannot trace
(control flow on values, shapes unpacked from ``x.shape`` ...) is kept whole too, and its
operation is later evaluated by ``torch.func.jvp``.
"""

from typing import Any, Callable, Dict, List, Tuple

from torch import fx, nn

__all__ = ["TracingError", "FallbackTracer", "trace_network"]


class TracingError(RuntimeError):
    """The network could not be traced into a plan (the generic path is used instead)."""


class FallbackTracer(fx.Tracer):
    """``torch.fx`` tracer that keeps a submodule whole (a leaf) when it has a rule
    (``keep_whole(module)``) or when tracing into it fails, e.g. attention blocks that
    unpack ``x.shape`` or pad by computed sizes (``failed`` lists those)."""

    def __init__(self, keep_whole: Callable[[nn.Module], bool]):
        super().__init__()
        self.keep_whole = keep_whole
        self.failed: List[str] = []

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        """A module with a rule is a leaf; else fx's default (the ``torch.nn`` layers)."""
        if self.keep_whole(m):
            return True
        return super().is_leaf_module(m, module_qualified_name)

    def call_module(self, m: nn.Module, forward: Callable, args: Tuple, kwargs: Dict) -> Any:
        """Trace into ``m``; if that fails, undo the attempt and record ``m`` as one call."""
        if self.is_leaf_module(m, self.path_of_module(m)):
            return super().call_module(m, forward, args, kwargs)
        depth = len(self.module_stack)
        nodes_before = len(self.graph.nodes)
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception:  # noqa: BLE001 - any failure inside: keep the module whole
            while len(self.module_stack) > depth:  # fx does not unwind it on errors
                self.module_stack.popitem(last=True)
            for node in reversed(list(self.graph.nodes)[nodes_before:]):  # the failed attempt
                self.graph.erase_node(node)
            name = self.path_of_module(m)
            self.failed.append(name)
            return self.create_proxy("call_module", name, args, kwargs)


def trace_network(model: nn.Module, keep_whole: Callable[[nn.Module], bool]) -> Tuple[fx.Graph, FallbackTracer]:
    """The ``torch.fx`` graph of ``model`` traced in eval mode (its mode is restored) and the
    tracer (whose ``root`` holds constants the graph refers to). Raises
    :class:`TracingError` when the network cannot be traced at its top level."""
    tracer = FallbackTracer(keep_whole)
    was_training = model.training
    model.eval()
    try:
        graph = tracer.trace(model)
    except Exception as err:  # noqa: BLE001 - any tracing failure: generic path
        raise TracingError(f"torch.fx could not trace {type(model).__name__}: {err}") from err
    finally:
        model.train(was_training)
    return graph, tracer
