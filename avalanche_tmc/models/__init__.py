"""Models of this library beside the tangent model (:mod:`avalanche_tmc.tangent`): the
frozen features and closed-form heads of the training-free learners (:mod:`.training_free`),
and a network split into a frozen trunk and a trained top (:mod:`.frozen_trunk`)."""

from .frozen_trunk import ChainSegment, NotAChainError, split_network, trunk_features
from .training_free import LayerFeatures, TrainingFreeClassifier, penultimate

__all__ = ["TrainingFreeClassifier", "LayerFeatures", "penultimate", "ChainSegment", "NotAChainError",
           "split_network", "trunk_features"]
