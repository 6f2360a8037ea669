"""Writes the fixture files of format version 3 (``v3/``) that ``test_storage.py`` reads
as files written by an earlier version, from the checkout's library::

    python tests/avalanche_tmc/files/data/make_fixture.py tests/avalanche_tmc/files/data/v3

It writes two tangent components (experiences 0 and 1), their composition, a component
signed with :data:`KEY` (experience 2), one experience's head statistics on
``LayerFeatures`` (experience 3, a class of this library: recorded by its registered
name), and ``expected.safetensors`` / ``expected.json``: the network, every tensor the
files hold, the composition's sum and ``δ``, each file's SHA-256 and base. Kept as it ran
(but for the names of the classes it imports, which follow the library's renames and put
no name of their own into the files); never run by the tests. ``v2/`` holds the files of
format version 2, written at commit c0a4796 by this script as it was then
(``git show 73cedf0:tests/avalanche_tmc/files/data/make_fixture.py``): this library
refuses them, saying what to do.
"""

import hashlib
import json
import os
import sys

import torch
from safetensors.torch import save_file
from torch import nn

KEY = b"fixture-key-0123456789abcdef"


def tiny_net() -> nn.Module:
    """A 3 -> 4 -> 2 network with BatchNorm (running statistics set away from their defaults)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    net[1].running_mean.copy_(torch.tensor([0.1, -0.2, 0.3, 0.05]))
    net[1].running_var.copy_(torch.tensor([1.5, 0.7, 1.1, 0.9]))
    return net.eval()


def main(out: str) -> None:
    import avalanche_tmc
    from avalanche_tmc import files as cf
    from avalanche_tmc.composition.statistics import head_statistics
    from avalanche_tmc.models.training_free import LayerFeatures, TrainingFreeClassifier
    from avalanche_tmc.tangent import TangentModel

    print("library:", os.path.dirname(avalanche_tmc.__file__))
    net = tiny_net()
    expected = {f"net/{n}": t.clone() for n, t in net.state_dict().items()}
    model = TangentModel(tiny_net())
    generator = torch.Generator().manual_seed(1)
    deltas = {e: {n: torch.randn(s, generator=generator) for n, s in model.delta_shapes().items()} for e in (0, 1, 2)}
    components = [
        cf.tangent_component(model, deltas[0], 0, classes={0: [0]}, settings=dict(lr=0.01, mode="tmc")),
        cf.tangent_component(model, deltas[1], 1, weight=2.5, classes={0: [1]}, settings=dict(lr=0.01, mode="tmc")),
    ]
    files = {}
    for component in components:
        files[f"experience-{component.experience}.safetensors"] = component
        cf.save_component(component, os.path.join(out, f"experience-{component.experience}.safetensors"))
    composition = cf.compose_components(components)
    files["composition.safetensors"] = composition
    cf.save_component(composition, os.path.join(out, "composition.safetensors"))
    signed = cf.tangent_component(model, deltas[2], 2, classes={0: [0, 1]})
    files["signed-experience-2.safetensors"] = signed
    cf.save_component(signed, os.path.join(out, "signed-experience-2.safetensors"), key=KEY)
    head = TrainingFreeClassifier(LayerFeatures(tiny_net(), "1"), 2)
    x, y = torch.randn(6, 3, generator=generator), torch.tensor([0, 1, 0, 1, 1, 0])
    stats = cf.statistics_component(head, head_statistics(head.embed(x), y, 2), 3, classes={0: [0, 1]})
    files["statistics-experience-3.safetensors"] = stats
    cf.save_component(stats, os.path.join(out, "statistics-experience-3.safetensors"))

    for e, delta in deltas.items():
        expected.update((f"delta/{e}/{n}", t) for n, t in delta.items())
    expected.update((f"statistics/3/{n}", t) for n, t in stats.tensors.items())
    expected.update((f"composition/sum/{n}", t) for n, t in composition.tensors.items())
    expected.update((f"composition/delta/{n}", t) for n, t in cf.composed_delta(composition).items())
    save_file({n: t.contiguous() for n, t in expected.items()}, os.path.join(out, "expected.safetensors"))
    summary = {}
    for name, component in files.items():
        with open(os.path.join(out, name), "rb") as f:
            data = f.read()
        summary[name] = dict(file_sha256=hashlib.sha256(data).hexdigest(), content_sha256=component.sha256,
                             base=component.base, weight=component.weight, members=component.members,
                             settings=component.settings)
    summary["key"] = KEY.decode()
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
