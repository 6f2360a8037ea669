"""Nested call arguments (lists, tuples, dicts) as flat lists and back: how the plan hands an
operation's tensors to ``torch.func.jvp`` and finds which of them carry a tangent."""

from typing import Any, List, Tuple

__all__ = ["tree_flatten", "tree_unflatten"]


def tree_flatten(value: Any) -> Tuple[List[Any], Any]:
    """Leaves of nested lists/tuples/dicts (None is a leaf) and the structure."""
    if isinstance(value, (list, tuple)):
        leaves: List[Any] = []
        specs = []
        for v in value:
            sub, spec = tree_flatten(v)
            leaves.extend(sub)
            specs.append((len(sub), spec))
        return leaves, (type(value), specs)
    if isinstance(value, dict):
        leaves, spec = tree_flatten(list(value.values()))
        return leaves, (dict, (list(value.keys()), spec))
    return [value], None


def tree_unflatten(leaves: List[Any], spec: Any) -> Any:
    """Inverse of :func:`tree_flatten`."""
    if spec is None:
        return leaves[0]
    kind, inner = spec
    if kind is dict:
        keys, list_spec = inner
        return dict(zip(keys, tree_unflatten(leaves, list_spec)))
    out, start = [], 0
    for count, sub in inner:
        out.append(tree_unflatten(leaves[start:start + count], sub))
        start += count
    return out if kind is list else tuple(out)
