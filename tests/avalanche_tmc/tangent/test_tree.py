"""tree_flatten / tree_unflatten: nested arguments as leaves and back."""

from avalanche_tmc.tangent.tree import tree_flatten, tree_unflatten


def test_flatten_lists_leaves_in_order_and_unflatten_restores_types():
    value = ([1, (2, None)], {"b": 3, "a": [4]}, 5)
    leaves, spec = tree_flatten(value)
    assert leaves == [1, 2, None, 3, 4, 5]
    back = tree_unflatten(leaves, spec)
    assert back == value and type(back) is tuple and type(back[0]) is list and type(back[0][1]) is tuple
    assert list(back[1]) == ["b", "a"]
    assert tree_unflatten([10, 20, 30, 40, 50, 60], spec) == ([10, (20, 30)], {"b": 40, "a": [50]}, 60)
    assert tree_flatten(7) == ([7], None) and tree_unflatten([7], None) == 7
