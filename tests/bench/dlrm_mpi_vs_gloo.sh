#!/bin/bash
# The DLRM example (examples/dlrm) one rank per process on this host, MPI against Gloo (issue 30):
# per world size and layout (1D: one sharding group; 2D: two replica groups), the same run
# launched twice, alternating: with torchrun's variables (Gloo over TCP loopback) and under
# mpirun with --mpi 1 (the MPI plugin). Prints rank 0's samples/s of the last report and the
# final loss of each (equal at world 2; at world 4 Gloo sums the dense all-reduce in another
# order than MPI's rank order, so the last digits may differ).
# Usage: dlrm_mpi_vs_gloo.sh DLRM_BINARY [ROUNDS] [STEPS]  (SHARDREC_MPI_PLUGIN as for the tests)
set -u
dlrm=$1 rounds=${2:-2} steps=${3:-100}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
port=$((21000 + $$ % 2000))
rate() { sed -n 's/.* \([0-9]*\) samples\/s.*/\1/p' "$1" | tail -1; }
loss() { sed -n 's/^rank 0: final loss \([0-9.e+-]*\).*/\1/p' "$1"; }
printf "%-6s %-7s %-5s %12s %12s %8s  %s\n" world layout round gloo_sps mpi_sps mpi/gloo "final loss (gloo, mpi)"
for world in 2 4; do
  for layout in 1D 2D; do
    shard=$world
    [ $layout = 2D ] && shard=$((world / 2))
    args=(--shard "$shard" --steps "$steps" --batch 256 --report "$steps" --eval-every 0)
    for ((k = 1; k <= rounds; ++k)); do
      port=$((port + 1))
      pids=()
      for ((r = 0; r < world; ++r)); do
        env -u RANK -u WORLD_SIZE MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r \
          WORLD_SIZE=$world LOCAL_RANK=$r LOCAL_WORLD_SIZE=$world timeout 300 \
          "$dlrm" --launcher env "${args[@]}" >"$out/gloo$r.txt" 2>&1 &
        pids+=($!)
      done
      for p in "${pids[@]}"; do wait "$p"; done
      timeout 300 mpirun --oversubscribe --allow-run-as-root -np "$world" -x SHARDREC_MPI_PLUGIN \
        --output-filename "$out/mpi" "$dlrm" --mpi 1 "${args[@]}" >/dev/null 2>&1
      m=$(find "$out/mpi" -path '*rank.0*' -name stdout | head -1)
      g=$(rate "$out/gloo0.txt") p=$(rate "$m")
      printf "%-6s %-7s %-5s %12s %12s %8s  %s %s\n" "$world" "$layout" "$k" "$g" "$p" \
        "$(awk -v a="$g" -v b="$p" 'BEGIN { if (a > 0) printf "%.2f", b / a }')" \
        "$(loss "$out/gloo0.txt")" "$(loss "$m")"
      rm -rf "$out/mpi"
    done
  done
done
