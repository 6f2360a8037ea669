"""A process of the checkpoint/resume test, run from the checkout's root:
``python -m tests.avalanche_tmc.checkpoint_job MODE CKPT OUT [DEVICE]`` (DEVICE: the tests'
device, default cpu).

MODE ``first``: train experiences 0 and 1, checkpoint, exit. ``resume``: load the
checkpoint into a freshly built strategy, train the rest. ``full``: all experiences in
one process. ``resume`` and ``full`` save the composed δ and component keys to OUT."""

import sys
import warnings

import torch

from avalanche_tmc.files.checkpoint import maybe_load_checkpoint, save_checkpoint
from tests.helpers import prepare_device, resolve_device, small_benchmark, tmc

warnings.filterwarnings("ignore")

mode, ckpt, out = sys.argv[1:4]
device = resolve_device(sys.argv[4] if len(sys.argv) > 4 else "cpu")
prepare_device(device)
bm = small_benchmark(n_experiences=4)
strategy, start = tmc(device=device), 0
if mode == "resume":
    strategy, start = maybe_load_checkpoint(strategy, ckpt)
    assert start == 2, start
stop = 2 if mode == "first" else 4
for exp in list(bm.train_stream)[start:stop]:
    strategy.train(exp, shuffle=False)
if mode == "first":
    save_checkpoint(strategy, ckpt)
else:
    torch.save({"delta": strategy.composed_delta, "keys": strategy.tangent_plugin.composition.keys,
                "components": dict(strategy.components)}, out)
