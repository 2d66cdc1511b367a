"""PyTorch DDP over gloo on scikit-learn's digits, reporting to Trainyard's progress server.

Run by torchrun on every node of a TrainJob on the torch-distributed runtime: torchrun
reads the rendezvous from the PET_* variables the controller injects (PET_NNODES,
PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT, PET_NPROC_PER_NODE). The digits data
set ships inside scikit-learn, so nothing is downloaded. The learning rate and the
hidden layer's size come from KUBEFLOW_TRAINER_OPT_LR and KUBEFLOW_TRAINER_OPT_HIDDEN_SIZE
when an OptimizationJob's trial sets them (examples/digits-search). Rank 0 reports
progressPercentage, estimatedRemainingSeconds and the loss and accuracy after every
epoch to KUBEFLOW_TRAINER_SERVER_URL with the projected token and CA the controller
mounts (upstream Kubeflow Trainer's contract); a report that fails is logged and
training goes on.
"""

import datetime
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel

EPOCHS = int(os.environ.get("EPOCHS", "30"))
BATCH = 64
# Hyperparameters. A trial of an OptimizationJob (examples/digits-search) gets the
# search's choice for each parameter as KUBEFLOW_TRAINER_OPT_<NAME>.
LR = float(os.environ.get("KUBEFLOW_TRAINER_OPT_LR", "0.1"))
HIDDEN_SIZE = int(os.environ.get("KUBEFLOW_TRAINER_OPT_HIDDEN_SIZE", "64"))


def report(progress, remaining, loss, accuracy):
    url = os.environ.get("KUBEFLOW_TRAINER_SERVER_URL")
    if not url:
        return
    with open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]) as f:
        token = f.read().strip()
    body = json.dumps({"trainerStatus": {
        "progressPercentage": progress,
        "estimatedRemainingSeconds": remaining,
        "metrics": [{"name": "loss", "value": f"{loss:.4f}"}, {"name": "accuracy", "value": f"{accuracy:.4f}"}],
        # Required by the API (trainerStatus has a CEL rule on it), at second precision.
        "lastUpdatedTime": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }}).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Authorization": "Bearer " + token, "Content-Type": "application/json"})
    ctx = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            print(f"progress report {progress}%: HTTP {resp.status}", flush=True)
    except urllib.error.HTTPError as e:  # the server says why, as a Kubernetes Status
        print(f"progress report {progress}% refused: HTTP {e.code}: {e.read().decode(errors='replace')}", flush=True)
    except Exception as e:  # training must not stop because a report failed
        print(f"progress report {progress}% failed: {e}", flush=True)


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank} of {world}: rendezvous at {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}, "
          f"lr {LR:g}, hidden size {HIDDEN_SIZE}", flush=True)
    torch.manual_seed(0)
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y, dtype=torch.long)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    test, train = perm[:360], perm[360:]
    shard = train[rank::world]  # each rank trains on its own part of the data
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, HIDDEN_SIZE), nn.ReLU(), nn.Linear(HIDDEN_SIZE, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    start = time.time()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        total, batches = 0.0, 0
        order = shard[torch.randperm(len(shard), generator=torch.Generator().manual_seed(epoch))]
        for i in range(0, len(order), BATCH):
            idx = order[i:i + BATCH]
            opt.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()  # DDP averages the gradients of all ranks here
            opt.step()
            total, batches = total + loss.item(), batches + 1
        mean = torch.tensor([total / batches])
        dist.all_reduce(mean)
        mean = mean.item() / world
        model.eval()
        with torch.no_grad():
            accuracy = (model(x[test]).argmax(1) == y[test]).float().mean().item()
        if rank == 0:
            elapsed = time.time() - start
            remaining = int(elapsed / epoch * (EPOCHS - epoch))
            print(f"epoch {epoch}/{EPOCHS} loss {mean:.4f} accuracy {accuracy:.4f}", flush=True)
            report(int(100 * epoch / EPOCHS), remaining, mean, accuracy)
    dist.barrier()
    if rank == 0:
        print(f"done: {EPOCHS} epochs on {world} nodes in {time.time() - start:.1f}s, test accuracy {accuracy:.4f}", flush=True)
    # Exit without running destructors. Torch 1.13 (Debian's, in the local stand-in
    # image) can deadlock tearing down DDP's gloo process group: its destructor joins a
    # worker thread while holding the GIL, and the worker, still releasing the last
    # collective's tensors, waits for the GIL. Everything is flushed and every rank is
    # past the barrier, so there is nothing left to tear down.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
