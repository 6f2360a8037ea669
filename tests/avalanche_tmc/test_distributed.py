"""Parallel training on torch.distributed: 2 processes started by torchrun against the
sequential run (same seeds), an injected failure and a hung rank (bounded time), and the
single-process behaviour of the same API. On the tests' ``device`` with the ``dist_backend``
(gloo on CPU, NCCL on CUDA with a GPU per process: see tests/conftest.py)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from avalanche.core import SupervisedPlugin
from avalanche.training.plugins import ReplayPlugin
from safetensors import safe_open
from safetensors.torch import load_file

from avalanche_tmc import TangentModel, TMCSeqStrategy, TMCStrategy
from avalanche_tmc.distributed import init_parallel, train_parallel
from tests.helpers import NUM_CLASSES, TinyResNet, quiet_evaluator, random_delta, small_benchmark, tensor_dataset, tmc

ROOT = Path(__file__).resolve().parents[2]
JOB = ["-m", "tests.avalanche_tmc.parallel_job"]


def _run(args, timeout=240):
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", PYTHONWARNINGS="ignore")
    start = time.time()
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return done, time.time() - start


def _on(device, backend):
    """The job's arguments that put it on the tests' device and backend."""
    return ["--device", str(device), "--backend", backend]


def _torchrun(out, device, backend, *extra, timeout=240):
    return _run(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *JOB, str(out),
                 *_on(device, backend), *extra], timeout=timeout)


def _result(path):
    with safe_open(str(path), "pt") as f:
        metadata = {k: json.loads(v) for k, v in f.metadata().items()}
    return load_file(str(path)), metadata


def test_without_a_launcher_it_trains_sequentially_seeded_by_experience(device):
    assert init_parallel() == (0, 1) and not dist.is_initialized()
    bm = small_benchmark(n_experiences=4)
    strategy = tmc(device=device)
    report = train_parallel(strategy, bm.train_stream, seed=7)
    reference = tmc(device=device)
    for exp in bm.train_stream:
        torch.manual_seed(7000 + exp.current_experience)  # avalanche_tmc.experience_seed(7, id)
        reference.train(exp)
    assert report.world_size == 1 and report.assignment == {0: [0, 1, 2, 3]} and report.bytes_broadcast == 0
    assert strategy.tangent_plugin.composition.keys == [0, 1, 2, 3]
    for name, value in reference.composed_delta.items():
        assert torch.equal(strategy.composed_delta[name], value)
        assert strategy.composed_delta[name].device.type == device.type
    assert strategy.tangent_plugin.component_classes == reference.tangent_plugin.component_classes
    with pytest.raises(KeyError, match="already"):
        train_parallel(strategy, bm.train_stream[:1], seed=7)


def test_a_failure_leaves_the_strategy_as_before(monkeypatch, device):
    bm = small_benchmark(n_experiences=4)
    strategy = tmc(device=device)
    train_parallel(strategy, bm.train_stream[:1], seed=0)
    before = strategy.composed_delta
    calls = []
    original = TMCStrategy.train

    def failing(self, exp, *args, **kwargs):
        calls.append(exp.current_experience)
        if exp.current_experience == 2:
            raise RuntimeError("boom")
        return original(self, exp, *args, **kwargs)

    monkeypatch.setattr(TMCStrategy, "train", failing)
    with pytest.raises(RuntimeError, match="boom"):
        train_parallel(strategy, bm.train_stream[1:], seed=0)
    assert calls == [1, 2]
    assert strategy.tangent_plugin.composition.keys == [0]
    assert all(torch.equal(strategy.composed_delta[n], v) for n, v in before.items())
    assert all(torch.equal(strategy.model.delta[n], v) for n, v in before.items())


def test_tmc_seq_replay_and_other_strategies_are_refused():
    bm = small_benchmark(n_experiences=2)
    model = TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES)
    with pytest.raises(ValueError, match="sequential by definition"):
        train_parallel(TMCSeqStrategy(model=model, evaluator=quiet_evaluator()), bm.train_stream)
    with pytest.raises(ValueError, match="replay"):
        train_parallel(tmc(plugins=[ReplayPlugin(mem_size=10)]), bm.train_stream)
    with pytest.raises(TypeError, match="TMCStrategy"):
        train_parallel(object(), bm.train_stream)
    with pytest.raises(ValueError, match="timeout"):
        train_parallel(tmc(), bm.train_stream, timeout=0)


def test_loaders_never_shard_an_experience_in_a_process_group(tmp_path, device, dist_backend):
    """Avalanche's loaders shard an experience over the ranks once a group exists; the
    tangent strategies must not (each trains whole experiences)."""
    dist.init_process_group(dist_backend, init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        bm = small_benchmark(n_experiences=2, train=tensor_dataset(48))
        seen = []

        class Loaders(SupervisedPlugin, supports_distributed=True):
            def before_training_epoch(self, strategy, **kwargs):
                seen.append((strategy.dataloader.distributed_sampling, sum(len(b[1]) for b in strategy.dataloader)))

            def before_eval_exp(self, strategy, **kwargs):
                seen.append((strategy.dataloader.distributed_sampling, sum(len(b[1]) for b in strategy.dataloader)))

        strategy = tmc(plugins=[Loaders()], device=device)
        strategy.train(bm.train_stream[0])
        strategy.eval(bm.test_stream[:1])
        assert seen == [(False, 24), (False, 8)]  # the whole experience, not a shard
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, device, dist_backend):
    out = tmp_path_factory.mktemp("parallel")
    sequential, _ = _run([*JOB, str(out / "sequential"), "--device", str(device)])
    assert sequential.returncode == 0, sequential.stderr[-3000:]
    parallel, seconds = _torchrun(out / "parallel", device, dist_backend)
    assert parallel.returncode == 0, parallel.stderr[-3000:]
    return out


@pytest.mark.integration
def test_two_processes_end_with_the_sequential_composition(runs, device):
    sequential, seq_meta = _result(runs / "sequential" / "rank0.safetensors")
    rank0, meta0 = _result(runs / "parallel" / "rank0.safetensors")
    rank1, meta1 = _result(runs / "parallel" / "rank1.safetensors")
    assert meta0["report"]["world"] == 2 and meta0["report"]["assignment"] == {"0": [0, 2], "1": [1, 3]}
    assert seq_meta["report"]["world"] == 1
    # every rank holds what it learned and what it received on the strategy's device
    assert meta0["devices"] == meta1["devices"] == seq_meta["devices"] == [device.type]
    # every rank ends with the same state
    assert rank0.keys() == rank1.keys() == sequential.keys()
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0)
    assert meta0["keys"] == meta1["keys"] == seq_meta["keys"] == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert meta0["classes"] == seq_meta["classes"]
    # components are the same computation on the same data and seed: identical
    components = [k for k in sequential if k.startswith("component")]
    assert len(components) > 4 and all(torch.equal(rank0[k], sequential[k]) for k in components)
    # the composition is summed in another order: equal to float rounding
    for key in [k for k in sequential if k.startswith(("composed", "model"))]:
        assert torch.allclose(rank0[key], sequential[key], rtol=1e-5, atol=1e-8), key
    # the training-free head: the summed statistics and the head solved from them
    for key in [k for k in sequential if k.startswith(("stats", "head"))]:
        assert torch.allclose(rank0[key], sequential[key], rtol=1e-9, atol=1e-9), key
    assert meta0["ridge_lambda"] == pytest.approx(seq_meta["ridge_lambda"], rel=1e-9)
    # what was communicated: the sum once (all-reduce) and each component (broadcast)
    numel = sum(t.numel() for k, t in sequential.items() if k.startswith("composed"))
    assert meta0["report"]["bytes_reduced"] == 4 * numel
    assert meta0["report"]["bytes_broadcast"] == 4 * 4 * numel


@pytest.mark.integration
def test_a_failing_rank_fails_the_run_naming_rank_and_experience(tmp_path, device, dist_backend):
    done, seconds = _torchrun(tmp_path, device, dist_backend, "--fail-rank", "1", "--fail-experience", "3",
                              "--timeout", "60")
    assert done.returncode != 0
    message = "rank 1 failed on experience 3 (RuntimeError: injected failure on experience 3)"
    output = done.stdout + done.stderr
    assert f"[rank0]: avalanche_tmc.distributed_setup.ParallelTrainingError: {message}" in output
    assert f"[rank1]: avalanche_tmc.distributed_setup.ParallelTrainingError: {message}" in output
    assert seconds < 120 and not list(tmp_path.glob("rank*.safetensors"))


@pytest.mark.integration
def test_a_hung_rank_fails_the_run_within_the_timeout(tmp_path, device, dist_backend):
    done, seconds = _torchrun(tmp_path, device, dist_backend, "--fail-rank", "1", "--fail-experience", "3", "--hang",
                              "--timeout", "5")
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "rank 1 (experiences [1, 3]) did not reach the composition within 5 s" in output
    assert seconds < 120  # the hung rank sleeps 600 s: the run ended on the timeout, not on it


@pytest.mark.integration
def test_when_rank_0_is_lost_the_survivor_names_it(tmp_path, device, dist_backend):
    """Issue 21: the survivor's message never named the lost rank (only rank 0 could)."""
    done, seconds = _torchrun(tmp_path, device, dist_backend, "--fail-rank", "0", "--fail-experience", "2", "--hang",
                              "--timeout", "5")
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "rank 0 (experiences [0, 2]) did not reach the composition within 5 s after rank 1" in output, output[-3000:]
    assert seconds < 120


def test_what_goes_through_a_collective_lives_on_the_communication_device(monkeypatch):
    """Issue 23: NCCL takes CUDA tensors only, and what comes back belongs on the strategy's
    device. Rank 1 of 2, which trained nothing, composes rank 0's two components: the
    report payload, the zeros it adds to the sum and the buffers it receives the components
    in are made on the communication device, and the results land on the strategy's
    device. The ``meta`` device stands in for CUDA (a CPU tensor where a meta one belongs
    is seen, and a meta result cannot be copied to the CPU), so no GPU is needed."""
    import json as _json

    from avalanche_tmc import distributed

    meta = torch.device("meta")
    trained = tmc()  # rank 0's components: what its status reports
    composition = trained.learned()
    for key in (0, 1):
        composition.add(key, random_delta(trained.model, seed=key))
    statuses = [dict(rank=0, failure=None, weights=[[k, w] for k, w in composition.weights.items()],
                     checksums=[[k, c] for k, c in composition.checksums.items()],
                     layout=distributed._layout(composition.summed())),
                dict(rank=1, failure=None, weights=[], checksums=[], layout=None)]
    sent = []

    def gather_all(payload):
        sent.append(("gather", payload.device))
        return [torch.tensor(list(_json.dumps(s).encode()), dtype=torch.uint8) for s in statuses]

    def all_reduce(tensor):
        sent.append(("all_reduce", tensor.device))

    def broadcast(tensor, src):
        sent.append(("broadcast", tensor.device))
        return tensor

    monkeypatch.setattr(distributed, "_comm_device", lambda: meta)
    monkeypatch.setattr(distributed, "_wait_for_all", lambda *args: None)
    monkeypatch.setattr(distributed.DistributedHelper, "gather_all", gather_all)
    monkeypatch.setattr(distributed.DistributedHelper, "broadcast", broadcast)
    monkeypatch.setattr(distributed.dist, "all_reduce", all_reduce)
    from avalanche_tmc.training.strategies import tangent

    monkeypatch.setattr(tangent, "check_device", lambda device: None)  # meta stands in for CUDA (refused otherwise)
    learner = distributed._Learner(tmc(device=meta))
    learner.set_aside()
    shares = [[0, 1], []]
    report = distributed.ParallelReport(rank=1, world_size=2, assignment={0: [0, 1], 1: []}, experiences=[0, 1])
    weights, total, components, checksums = distributed._compose(learner, [0, 1], shares, None, report.assignment,
                                                                 (None, None), report, timeout=5)
    assert sent == [("gather", meta), ("all_reduce", meta), ("broadcast", meta), ("broadcast", meta)]
    assert weights == composition.weights and checksums == composition.checksums
    assert total.keys() == composition.summed().keys() and list(components) == [0, 1]
    received = [*total.values(), *(t for c in components.values() for t in c.values())]
    assert all(t.device == meta for t in received)
    assert [t.dtype for t in total.values()] == [t.dtype for t in composition.summed().values()]
