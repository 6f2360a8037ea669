"""The process group of parallel training (``avalanche_tmc.distributed_setup``): the share-out
of experiences among ranks, an incomplete launcher environment refused as a set-up error,
the lost ranks a failed barrier names, and the device checks of an NCCL job."""

import pytest
import torch.distributed as dist

from avalanche_tmc.distributed_setup import assign_experiences, init_parallel


def test_assign_experiences_balances_sizes_deterministically():
    assert assign_experiences([10, 10, 10, 10, 10], 2) == [[0, 2, 4], [1, 3]]
    assert assign_experiences([50, 10, 10, 10, 10, 10], 2) == [[0], [1, 2, 3, 4, 5]]
    assert assign_experiences([3, 3], 4) == [[0], [1], [], []]
    shares = assign_experiences([7, 1, 4, 4, 9, 2], 3)
    assert sorted(i for s in shares for i in s) == list(range(6))
    loads = [sum([7, 1, 4, 4, 9, 2][i] for i in s) for s in shares]
    assert max(loads) - min(loads) <= 2
    with pytest.raises(ValueError):
        assign_experiences([1], 0)


@pytest.mark.integration
@pytest.mark.parametrize("environment, message", [
    (dict(WORLD_SIZE="2"), r"sets \['WORLD_SIZE'\] but not \['RANK', 'MASTER_ADDR', 'MASTER_PORT'\]"),
    (dict(RANK="0"), "but not"),
    (dict(RANK="two", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29999"), "must be integers"),
    (dict(RANK="3", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29999"), "not a rank of"),
])
def test_an_incomplete_launcher_environment_is_a_setup_error(monkeypatch, environment, message):
    """Issue 21: WORLD_SIZE without torchrun exited 1 (a bug) instead of 6 (a set-up failure)."""
    from avalanche_tmc.distributed_setup import ParallelSetupError, ParallelTrainingError

    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ParallelSetupError, match=message):
        init_parallel(timeout=5)
    assert issubclass(ParallelSetupError, ParallelTrainingError) and not dist.is_initialized()


@pytest.mark.integration
def test_a_survivor_names_the_lost_rank():
    """Issue 21: when a rank was killed, the survivor's message never named it."""
    from avalanche_tmc.distributed_setup import lost_ranks

    assert lost_ranks("[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 5 ms", 0, 4) == [1, 3]
    assert lost_ranks("Connection closed by peer [127.0.0.1]:29500", 1, 2) == [0]  # two ranks: the other one
    assert lost_ranks("[Rank 2] recv from rank 0 failed", 2, 3) == [0]
    assert lost_ranks("Connection reset by peer", 1, 3) == []  # cannot tell


def test_an_nccl_job_whose_processes_share_a_gpu_or_train_off_their_current_device_is_refused():
    """Issue 23: NCCL communicates through each process's current CUDA device and refuses two
    ranks on one GPU; what the ranks report is checked before anything goes through NCCL."""
    from avalanche_tmc.distributed_setup import _device_problems

    def rank(r, host="a", current=0, gpu="GPU-0", device="cuda"):
        return dict(rank=r, host=host, current=current, gpu=gpu, device=device)

    assert _device_problems([rank(0), rank(1, current=1, gpu="GPU-1")]) == []
    assert _device_problems([rank(0), rank(1, host="b")]) == []  # the same index on two machines
    assert _device_problems([rank(0, device="cpu"), rank(1, current=1, gpu="GPU-1", device="cuda:1")]) == []
    assert _device_problems([rank(0), rank(1)]) == ["ranks [0, 1] share GPU GPU-0 on a"]
    assert _device_problems([rank(0, device="cuda:0"), rank(1, current=0, gpu="GPU-1", device="cuda:1")]) == [
        "rank 1 trains on cuda:1 but its current CUDA device is cuda:0"]
