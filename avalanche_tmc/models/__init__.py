"""Models of this library beside the tangent model (:mod:`avalanche_tmc.tangent`): the
frozen features and closed-form heads of the training-free learners (:mod:`.analytic`)."""

from .analytic import AnalyticClassifier, LayerFeatures, penultimate

__all__ = ["AnalyticClassifier", "LayerFeatures", "penultimate"]
