#!/usr/bin/env bash
# The throughput table of docs/multihost.md: mh_bench through netns_bed.sh at 1, 2 and 4 hosts of
# 2 ranks, with the hosts' links unlimited, at 1 Gbit/s and at 100 Mbit/s (tbf), for row-wise
# and table-row-wise tables. Needs root, like the bed. Usage: bench_table.sh BUILD_DIR [STEPS]
set -u
build=$1 steps=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d "${TMPDIR:-/tmp}/shardrec-mh-bench.XXXXXX")
trap 'rm -rf "$out"' EXIT
echo "| sharding | hosts x ranks | link | samples/s | measured step (ms) | planner estimate (ms) | estimate / measured |"
echo "|---|---|---|---|---|---|---|"
for type in 2 4; do
  name=$([[ $type == 2 ]] && echo row-wise || echo table-row-wise)
  for hosts in 1 2 4; do
    for link in unlimited 1gbit 100mbit; do
      [[ $hosts == 1 && $link != unlimited ]] && continue
      args=(--hosts "$hosts" --ranks 2 --limit 120)
      case $link in
        1gbit) args+=(--rate 1gbit --env SHARDREC_BED_LINK_BYTES=125000000) ;;
        100mbit) args+=(--rate 100mbit --env SHARDREC_BED_LINK_BYTES=12500000) ;;
      esac
      dir=$out/$type-$hosts-$link
      "$here/netns_bed.sh" --out "$dir" "${args[@]}" -- "$build/tests/multihost/mh_bench" "$type" \
        "$steps" >/dev/null 2>&1
      rc=$?
      [[ $rc == 77 ]] && { echo "bench_table: the bed cannot run here" >&2; exit 77; }
      line=$(grep '^bench ' "$dir/rank0.log" 2>/dev/null)
      if [[ -z $line ]]; then
        echo "| $name | ${hosts}x2 | $link | failed (bed rc $rc) | | | |"
        continue
      fi
      read -r _ _ _ _ _ _ _ _ sps _ ms _ est <<<"$line"
      ratio=$(awk -v e="$est" -v m="$ms" 'BEGIN { printf "%.2f", e / m }')
      echo "| $name | ${hosts}x2 | $link | $sps | $ms | $est | $ratio |"
    done
  done
done
