"""Models of this library beside the tangent model (:mod:`avalanche_tmc.tangent`): the
frozen features and closed-form heads of the training-free learners (:mod:`.training_free`)."""

from .training_free import LayerFeatures, TrainingFreeClassifier, penultimate

__all__ = ["TrainingFreeClassifier", "LayerFeatures", "penultimate"]
