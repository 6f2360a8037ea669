"""The model part of the training-free heads (``avalanche_tmc.models.training_free``): frozen
features and a head solved in closed form, checked against the computation written out
(on the tests' ``device``)."""

import pytest
import torch
import torch.nn.functional as F

from avalanche_tmc import LayerFeatures, TrainingFreeClassifier, head_statistics, penultimate
from tests.helpers import TinyResNet


def network(seed: int = 0, device="cpu") -> TinyResNet:
    torch.manual_seed(seed)
    return TinyResNet(width=8, num_classes=10).to(device)


def test_penultimate_outputs_the_heads_input_and_leaves_the_network_alone(device):
    net = network(device=device).eval()
    x = torch.randn(6, 1, 8, 8).to(device)
    seen = []
    net.fc.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    net(x)
    features = penultimate(net)
    torch.testing.assert_close(features(x), seen[0])
    assert isinstance(net.fc, torch.nn.Linear) and all(p.requires_grad for p in net.parameters())
    assert not any(p.requires_grad for p in features.parameters()) and not features.training


def test_layer_features_are_the_pooled_output_of_that_layer(device):
    net = network(device=device).eval()
    x = torch.randn(8, 1, 8, 8).to(device)
    with torch.no_grad():
        stem = net.stem(x)
        torch.testing.assert_close(LayerFeatures(net, "stem")(x), stem.mean((2, 3)))
        torch.testing.assert_close(LayerFeatures(net, "block")(x), net.block(stem).mean((2, 3)))
        torch.testing.assert_close(LayerFeatures(net, "fc")(x), net(x))
    with pytest.raises(ValueError, match="has no module 'nowhere'"):
        LayerFeatures(net, "nowhere")


@pytest.mark.parametrize("projection_dim", [None, 16])
def test_the_ridge_head_is_the_closed_form_on_the_embedded_features(projection_dim, device):
    head = TrainingFreeClassifier(penultimate(network()), 10, projection_dim=projection_dim, seed=3).to(device)
    x, y = torch.randn(40, 1, 8, 8).to(device), (torch.arange(40) % 10).to(device)
    phi = head.embed(x)
    assert torch.equal(phi[:, -1].cpu(), torch.ones(40))  # the bias column
    head.fit(head_statistics(phi, y, 10), ridge_lambda=0.5)
    assert head.weight.device.type == device.type
    phi64 = phi.double().cpu()
    expected = torch.linalg.solve(phi64.T @ phi64 + 0.5 * torch.eye(phi.shape[1], dtype=torch.float64),
                                  phi64.T @ F.one_hot(y.cpu(), 10).double())
    torch.testing.assert_close(head.weight.double().cpu(), expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(head(x), phi @ head.weight)


def test_the_ncm_head_scores_cosine_to_the_class_means_and_never_predicts_an_unseen_class(device):
    head = TrainingFreeClassifier(penultimate(network()), 10, head="ncm").to(device)
    x, y = torch.randn(30, 1, 8, 8).to(device), (torch.arange(30) % 3).to(device)  # classes 0, 1, 2 only
    phi = head.embed(x)
    head.fit(head_statistics(phi, y, 10))
    means = torch.stack([phi[y == c].mean(0) for c in range(3)])
    scores = head(x)
    torch.testing.assert_close(scores[:, :3], F.normalize(phi, dim=1) @ F.normalize(means, dim=1).T)
    assert torch.equal(scores[:, 3:].cpu(), torch.full((30, 7), -2.0))  # below any cosine


@pytest.mark.parametrize("kind", ["ridge", "ncm"])
def test_a_head_solved_from_statistics_read_elsewhere_lands_on_the_modules_device(kind):
    """Issue 23: statistics read from a file or received from another process are CPU
    tensors; the head solved from them lives where the module does (checked on the ``meta``
    device, where a CPU tensor beside it would be an error, so no GPU is needed)."""
    embedder = TrainingFreeClassifier(penultimate(network()), 10, head=kind)
    x, y = torch.randn(30, 1, 8, 8), torch.arange(30) % 10
    stats = head_statistics(embedder.embed(x), y, 10)
    head = TrainingFreeClassifier(penultimate(network()), 10, head=kind).to("meta")
    head.fit(stats, ridge_lambda=0.5)
    solved = head.weight if kind == "ridge" else head.means
    shape = (9, 10) if kind == "ridge" else (10, 8)  # 8 features (the ridge head: and a bias), 10 classes
    assert solved.device.type == "meta" and solved.dtype == torch.float32 and solved.shape == shape
