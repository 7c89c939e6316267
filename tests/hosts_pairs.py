"""Which transport each pair of ranks used, for tests/hosts_test.py (under mpirun, on the emulated
hosts of launch/hosts_local.sh).

Every pair of ranks in turn exchanges BYTES each way while the others wait; each host's bytes
sent on its link (`eth0`) and on its loopback (`lo`) are read before and after (a rank in a host's
network namespace sees that host's counters). A pair that crossed the link moved at least
2 x BYTES over the hosts' eth0; a pair on one host that used shared memory moved next to nothing
over either (TCP within a host would show on lo). Rank 0 prints one line a pair and a last line
`pairs: JSON`.
"""

import json

from mpi4py import MPI
import numpy as np

BYTES = 4 << 20


def counters():
  out = {}
  for dev in ('eth0', 'lo'):
    try:
      with open(f'/sys/class/net/{dev}/statistics/tx_bytes') as f:
        out[dev] = int(f.read())
    except OSError:
      out[dev] = 0
  return out


def main():
  world = MPI.COMM_WORLD
  rank, size = world.Get_rank(), world.Get_size()
  hosts = world.allgather(MPI.Get_processor_name())
  send, recv = np.full(BYTES, rank, np.uint8), np.empty(BYTES, np.uint8)
  pairs = []
  for i in range(size):
    for j in range(i + 1, size):
      world.Barrier()
      before = counters()
      world.Barrier()
      if rank in (i, j):
        peer = j if rank == i else i
        world.Sendrecv(send, peer, recvbuf=recv, source=peer)
        assert (recv == peer).all()
      world.Barrier()
      after = counters()
      moved = world.gather({k: after[k] - before[k] for k in after}, root=0)
      if rank == 0:
        by_host = {hosts[r]: m for r, m in enumerate(moved)}  # One reading a host.
        eth = sum(m['eth0'] for m in by_host.values())
        lo = sum(m['lo'] for m in by_host.values())
        if eth >= 2 * BYTES:
          transport = 'tcp over the link'
        elif lo >= 2 * BYTES:
          transport = 'tcp over loopback'
        elif eth + lo < BYTES // 10:
          transport = 'shared memory'
        else:
          transport = 'unknown'
        pairs.append(
          {
            'ranks': [i, j],
            'hosts': [hosts[i], hosts[j]],
            'eth0': eth,
            'lo': lo,
            'transport': transport,
          }  # fmt: skip
        )
        print(
          f'ranks {i}-{j} ({hosts[i]}-{hosts[j]}): {transport} (link {eth / 1e6:.2f} MB, '
          f'loopback {lo / 1e6:.2f} MB for 2 x {BYTES / 1e6:.1f} MB)',
          flush=True,
        )
  if rank == 0:
    print('pairs: ' + json.dumps(pairs), flush=True)


if __name__ == '__main__':
  main()
