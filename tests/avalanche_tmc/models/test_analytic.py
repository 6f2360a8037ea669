"""The model part of the training-free heads (``avalanche_tmc.models.analytic``): frozen
features and a head solved in closed form, checked against the computation written out."""

import pytest
import torch
import torch.nn.functional as F

from avalanche_tmc import AnalyticClassifier, LayerFeatures, head_statistics, penultimate
from tests.helpers import TinyResNet


def network(seed: int = 0) -> TinyResNet:
    torch.manual_seed(seed)
    return TinyResNet(width=8, num_classes=10)


def test_penultimate_outputs_the_heads_input_and_leaves_the_network_alone():
    net = network().eval()
    x = torch.randn(6, 1, 8, 8)
    seen = []
    net.fc.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    net(x)
    features = penultimate(net)
    torch.testing.assert_close(features(x), seen[0])
    assert isinstance(net.fc, torch.nn.Linear) and all(p.requires_grad for p in net.parameters())
    assert not any(p.requires_grad for p in features.parameters()) and not features.training


def test_layer_features_are_the_pooled_output_of_that_layer():
    net = network().eval()
    x = torch.randn(8, 1, 8, 8)
    with torch.no_grad():
        stem = net.stem(x)
        torch.testing.assert_close(LayerFeatures(net, "stem")(x), stem.mean((2, 3)))
        torch.testing.assert_close(LayerFeatures(net, "block")(x), net.block(stem).mean((2, 3)))
        torch.testing.assert_close(LayerFeatures(net, "fc")(x), net(x))
    with pytest.raises(ValueError, match="has no module 'nowhere'"):
        LayerFeatures(net, "nowhere")


@pytest.mark.parametrize("projection_dim", [None, 16])
def test_the_ridge_head_is_the_closed_form_on_the_embedded_features(projection_dim):
    head = AnalyticClassifier(penultimate(network()), 10, projection_dim=projection_dim, seed=3)
    x, y = torch.randn(40, 1, 8, 8), torch.arange(40) % 10
    phi = head.embed(x)
    assert torch.equal(phi[:, -1], torch.ones(40))  # the bias column
    head.fit(head_statistics(phi, y, 10), ridge_lambda=0.5)
    phi64 = phi.double()
    expected = torch.linalg.solve(phi64.T @ phi64 + 0.5 * torch.eye(phi.shape[1], dtype=torch.float64),
                                  phi64.T @ F.one_hot(y, 10).double())
    torch.testing.assert_close(head.weight.double(), expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(head(x), phi @ head.weight)


def test_the_ncm_head_scores_cosine_to_the_class_means_and_never_predicts_an_unseen_class():
    head = AnalyticClassifier(penultimate(network()), 10, head="ncm")
    x, y = torch.randn(30, 1, 8, 8), torch.arange(30) % 3  # classes 0, 1, 2 only
    phi = head.embed(x)
    head.fit(head_statistics(phi, y, 10))
    means = torch.stack([phi[y == c].mean(0) for c in range(3)])
    scores = head(x)
    torch.testing.assert_close(scores[:, :3], F.normalize(phi, dim=1) @ F.normalize(means, dim=1).T)
    assert torch.equal(scores[:, 3:], torch.full((30, 7), -2.0))  # below any cosine


def test_an_unknown_head_is_refused():
    with pytest.raises(ValueError, match="head must be one of"):
        AnalyticClassifier(penultimate(network()), 10, head="svm")
