"""Distributed XGBoost on scikit-learn's digits, over the DMLC variables the controller injects.

Run on every node of a TrainJob on the xgboost-distributed runtime. The controller sets
DMLC_TRACKER_URI (node 0's DNS name), DMLC_TRACKER_PORT, DMLC_TASK_ID (this node's rank)
and DMLC_NUM_WORKER; as in upstream Kubeflow Trainer, rank 0 runs the Rabit tracker and
every rank then joins it as a worker. Each rank trains on its own shard; XGBoost's
collective all-reduces the gradient histograms, so all ranks build the same trees, and
each prints the same test error at the end.
"""

import os
import threading
import time

import numpy as np
import xgboost as xgb
from sklearn.datasets import load_digits
from xgboost import collective
from xgboost.tracker import RabitTracker

ROUNDS = int(os.environ.get("ROUNDS", "20"))


def start_tracker(workers, port):
    """Rank 0's tracker: listens on every address of the pod, at the injected port."""
    # sortby="task": ranks follow DMLC_TASK_ID, the node's index in the TrainJob, as
    # the controller numbers them (the default, "host", sorts by address).
    tracker = RabitTracker(host_ip="0.0.0.0", n_workers=workers, port=port, sortby="task")
    tracker.start(workers)
    thread = threading.Thread(target=tracker.join, daemon=True)
    thread.start()
    return thread


def join(uri, port, rank, attempts=60):
    """Connects this worker to the tracker, waiting for rank 0 to start it."""
    args = {"dmlc_tracker_uri": uri, "dmlc_tracker_port": port, "dmlc_task_id": str(rank)}
    for attempt in range(1, attempts + 1):
        try:
            collective.init(**args)
            return
        except xgb.core.XGBoostError as e:
            if attempt == attempts:
                raise
            print(f"rank {rank}: tracker {uri}:{port} not ready ({e}); retrying", flush=True)
            time.sleep(2)


def main():
    uri, port = os.environ["DMLC_TRACKER_URI"], int(os.environ["DMLC_TRACKER_PORT"])
    rank, workers = int(os.environ["DMLC_TASK_ID"]), int(os.environ["DMLC_NUM_WORKER"])
    tracker = start_tracker(workers, port) if rank == 0 else None
    join(uri, port, rank)
    print(f"rank {collective.get_rank()} of {collective.get_world_size()}: joined tracker {uri}:{port}", flush=True)

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(x))
    test, train = order[:360], order[360:]
    shard = train[rank::workers]  # each rank trains on its own part of the data
    dtrain = xgb.DMatrix(x[shard], label=y[shard])
    dtest = xgb.DMatrix(x[test], label=y[test])
    params = {"objective": "multi:softmax", "num_class": 10, "tree_method": "hist", "max_depth": 4, "nthread": 1}
    booster = xgb.train(params, dtrain, ROUNDS, evals=[(dtest, "test")], verbose_eval=5)
    error = float(np.mean(booster.predict(dtest) != y[test]))
    print(f"done: rank {rank} of {workers}, {ROUNDS} rounds, test error {error:.4f}", flush=True)
    collective.finalize()
    if tracker is not None:
        tracker.join(timeout=30)


if __name__ == "__main__":
    main()
