#!/bin/bash
# Launches the DLRM example the way clusters do and checks that every launched rank ends with the
# final loss of the same world trained as threads of one process (bit-identical numbers).
# Usage: launch_dlrm.sh DLRM_BINARY MODE WORLD [MPIRUN]
#   MODE: mpirun (Open MPI's variables), torchrun or slurm (their variables set by hand here).
set -u
dlrm=$1 mode=$2 world=$3 mpirun=${4:-mpirun}
args=(--shard 2 --steps 6 --batch 32 --report 3 --eval-every 0 --max-rows 1000)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$dlrm" --world "$world" "${args[@]}" >"$out/ref.txt" 2>&1 || { cat "$out/ref.txt"; exit 1; }
ref=$(sed -n 's/^rank 0: final loss \([0-9.e+-]*\).*/\1/p' "$out/ref.txt")
[ -n "$ref" ] || { echo "no reference loss"; cat "$out/ref.txt"; exit 1; }

# A port of our own for the hand-set conventions: 20000 + a job id, as Slurm's default does.
job=$(( ($$ * 7 + RANDOM) % 100000 ))
start=$(date +%s.%N)
case $mode in
  mpirun)
    # One output file per rank: mpirun's merged stream can split a rank's line.
    timeout 120 "$mpirun" --oversubscribe --allow-run-as-root -np "$world" \
      --output-filename "$out/mpi" "$dlrm" --launcher env "${args[@]}" >"$out/mpirun.txt" 2>&1 ||
      { cat "$out/mpirun.txt"; exit 1; }
    find "$out/mpi" -name stdout -exec cat {} + >"$out/all.txt"
    ;;
  torchrun|slurm)
    pids=()
    for ((r = 0; r < world; ++r)); do
      if [ "$mode" = torchrun ]; then
        vars=(MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + job % 10000)) RANK=$r
              WORLD_SIZE=$world LOCAL_RANK=$r LOCAL_WORLD_SIZE=$world)
      else
        vars=(SLURM_PROCID=$r SLURM_NTASKS=$world SLURM_LOCALID=$r SLURM_NODEID=0
              "SLURM_TASKS_PER_NODE=$world" "SLURM_JOB_NODELIST=localhost" SLURM_JOB_ID=$job)
      fi
      env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT "${vars[@]}" timeout 120 \
        "$dlrm" --launcher env "${args[@]}" >"$out/rank$r.txt" 2>&1 &
      pids+=($!)
    done
    failed=0
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
    cat "$out"/rank*.txt >"$out/all.txt"
    [ $failed = 0 ] || { cat "$out/all.txt"; exit 1; }
    ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
n=0
while read -r line; do
  loss=$(echo "$line" | sed -n 's/^rank [0-9]*: final loss \([0-9.e+-]*\).*/\1/p')
  [ -n "$loss" ] || continue
  n=$((n + 1))
  [ "$loss" = "$ref" ] || { echo "mismatch: '$line' vs one process $ref"; cat "$out/all.txt"; exit 1; }
done <"$out/all.txt"
[ "$n" = "$world" ] || { echo "expected $world ranks' losses, found $n"; cat "$out/all.txt"; exit 1; }
echo "[launch] $mode world $world: every rank's final loss $ref equals one process's (${took} s)"
