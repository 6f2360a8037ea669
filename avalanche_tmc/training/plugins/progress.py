"""``ProgressPlugin``: a tqdm bar per training epoch and evaluation experience (on stderr),
and the evaluation accuracy counted per experience (what ``avalanche-tmc evaluate`` prints)."""

import sys
from typing import TYPE_CHECKING, Any, Dict, Optional

from avalanche.core import SupervisedPlugin

__all__ = ["ProgressPlugin"]

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate


class ProgressPlugin(SupervisedPlugin, supports_distributed=True):
    """Shows a tqdm bar (on stderr) per training epoch and per evaluated experience, and
    counts the evaluation's correct predictions per experience::

        progress = ProgressPlugin()
        strategy = TMCStrategy(model=TangentModel(net), plugins=[progress])
        strategy.eval(benchmark.test_stream)
        accuracy = {e: progress.correct[e] / progress.seen[e] for e in progress.seen}

    :param enabled: show the bars (the counts are kept either way).
    :param position: the bar's line (one per process of a torchrun job, so that their bars
        do not overwrite each other).
    """

    def __init__(self, enabled: bool = True, position: int = 0):
        super().__init__()
        self.enabled = enabled
        self.position = position
        self.bar: Optional[Any] = None
        self.correct: Dict[int, int] = {}
        """Correct evaluation predictions per experience id."""
        self.seen: Dict[int, int] = {}
        """Evaluated samples per experience id."""

    def _open(self, desc: str, total: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=desc, unit="batch", disable=not self.enabled, position=self.position,
                        leave=False, file=sys.stderr)

    def _close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def before_training_epoch(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        exp = strategy.experience.current_experience
        self._open(f"experience {exp}, epoch {strategy.clock.train_exp_epochs + 1}/{strategy.train_epochs}",
                   len(strategy.dataloader))

    def after_training_iteration(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def after_training_epoch(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        self._close()

    def before_eval_exp(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        self._open(f"evaluating experience {strategy.experience.current_experience}", len(strategy.dataloader))

    def after_eval_iteration(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        exp = strategy.experience.current_experience
        right = int((strategy.mb_output.argmax(1) == strategy.mb_y).sum())
        self.correct[exp] = self.correct.get(exp, 0) + right
        self.seen[exp] = self.seen.get(exp, 0) + len(strategy.mb_y)
        if self.bar is not None:
            self.bar.update(1)

    def after_eval_exp(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        self._close()
