"""An MPI all-reduce across every process mpirun starts, with mpi4py.

Run by the launcher of a TrainJob on the deepspeed-distributed runtime as

    mpirun python3 -c "$(cat allreduce.py)"

mpirun reads the hostfile the controller publishes (/etc/mpi/hostfile, through
OMPI_MCA_orte_default_hostfile) and reaches every node over SSH on port 2222 with the
key pair from the TrainJob's SSH Secret. Each rank contributes rank+1; every rank must
get n(n+1)/2, and rank 0 prints the world it saw: one line per rank with the host it ran
on, so a reader sees the processes were spread over the nodes.
"""

import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank + 1, op=MPI.SUM)
hosts = comm.gather(socket.gethostname(), root=0)
if total != size * (size + 1) // 2:
    raise SystemExit(f"rank {rank}: allreduce gave {total}, want {size * (size + 1) // 2}")
if rank == 0:
    for r, host in enumerate(hosts):
        print(f"rank {r} of {size} on {host}", flush=True)
    print(f"allreduce over {size} ranks on {len(set(hosts))} hosts: sum {total}", flush=True)
