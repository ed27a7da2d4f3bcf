#!/usr/bin/env bash
# The throughput table of docs/multihost.md: mh_bench through netns_bed.sh at 1, 2 and 4 hosts of
# 2 ranks, with the hosts' links unlimited, at 1 Gbit/s and at 100 Mbit/s (tbf), for row-wise
# tables, table-row-wise ones exchanged as the planner chose (reduced inside each host or flat:
# the plan's host_reduce), and table-row-wise ones forced reduced (SHARDREC_HOST_REDUCE=1) and
# flat (SHARDREC_HOST_REDUCE=0). The planner gets the machine's calibration, the network's
# measured figure and the measured collective round (shardrec_topology_calibrate_network). A
# forced row's estimate is the plan's, so it is shown only where the plan chose that exchange.
# TRIALS runs of every configuration, interleaved (trial 1 of all, then trial 2 ...); the table
# gives the median step (and its range) and the median's other figures. Needs root, like the bed.
# Usage: bench_table.sh BUILD_DIR [STEPS] [TRIALS]
set -u
build=$1 steps=${2:-20} trials=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d "${TMPDIR:-/tmp}/shardrec-mh-bench.XXXXXX")
# BENCH_KEEP=DIR keeps every run's bench lines there (the table can be redone from them).
trap '[[ -n ${BENCH_KEEP:-} ]] && cp "$out"/*.lines "$BENCH_KEEP"/ 2>/dev/null; rm -rf "$out"' EXIT
configs=()
for kind in rw trw trw-red trw-flat; do
  for hosts in 1 2 4; do
    for link in unlimited 1gbit 100mbit; do
      [[ $hosts == 1 && $link != unlimited ]] && continue
      configs+=("$kind $hosts $link")
    done
  done
done
for ((trial = 0; trial < trials; ++trial)); do
  for c in "${configs[@]}"; do
    read -r kind hosts link <<<"$c"
    args=(--hosts "$hosts" --ranks 2 --limit 180)
    [[ $link != unlimited ]] && args+=(--rate "$link")
    type=4
    [[ $kind == rw ]] && type=2
    [[ $kind == trw-flat ]] && args+=(--env SHARDREC_HOST_REDUCE=0)
    [[ $kind == trw-red ]] && args+=(--env SHARDREC_HOST_REDUCE=1)
    dir=$out/$kind-$hosts-$link-$trial
    "$here/netns_bed.sh" --out "$dir" "${args[@]}" -- "$build/tests/multihost/mh_bench" "$type" \
      "$steps" >/dev/null 2>&1
    [[ $? == 77 ]] && { echo "bench_table: the bed cannot run here" >&2; exit 77; }
    grep '^bench ' "$dir/rank0.log" >>"$out/$kind-$hosts-$link.lines" 2>/dev/null
  done
done
echo "| sharding | hosts x ranks | link | planner's exchange | samples/s | step (ms), median [range] | planner estimate (ms) | estimate / measured | measured network (MB/s per rank) | host 0's link (KB sent per step) | inter-host share of the step |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for c in "${configs[@]}"; do
  read -r kind hosts link <<<"$c"
  name=$(case $kind in rw) echo row-wise ;; trw) echo "table-row-wise" ;;
    trw-red) echo "table-row-wise, forced reduced" ;; *) echo "table-row-wise, forced flat" ;; esac)
  f=$out/$kind-$hosts-$link.lines
  if [[ ! -s $f ]]; then
    echo "| $name | ${hosts}x2 | $link | | failed | | | | | | |"
    continue
  fi
  # Fields: sps=9 ms=11 est=13 net=15 tx=17 rx=19 host_reduce=21 (1-based, awk). The median run
  # by step time.
  sort -t" " -k11 -g "$f" | awk -v n="$(wc -l <"$f")" -v name="$name" -v hosts="$hosts" \
    -v link="$link" -v kind="$kind" '
    { ms[NR] = $11; line[NR] = $0 }
    END {
      split(line[int((n + 1) / 2)], m, " ")
      sps = m[9]; step = m[11]; est = m[13]; net = m[15]; tx = m[17]; rx = m[19]; hr = m[21]
      busy = tx > rx ? tx : rx
      # The link busy time: host 0 sends its bytes at 2 ranks x the per-rank measured rate.
      share = "-"
      if (net > 0) share = sprintf("%.2f", busy / (2 * net) * 1000 / step)
      netmb = "-"
      if (net > 0) netmb = sprintf("%.1f", net / 1e6)
      kb = "-"
      if (hosts > 1) kb = sprintf("%.0f", tx / 1000)
      choice = hr == 1 ? "reduced" : (hr == 0 ? "flat" : "-")
      shown = (kind == "trw-red" && hr == 0) || (kind == "trw-flat" && hr == 1) ? 0 : 1
      estv = shown ? sprintf("%.2f", est) : "-"
      ratio = shown ? sprintf("%.2f", est / step) : "-"
      printf("| %s | %sx2 | %s | %s | %s | %.2f [%.2f-%.2f] | %s | %s | %s | %s | %s |\n", name,
        hosts, link, choice, sps, step, ms[1], ms[n], estv, ratio, netmb, kb, share)
    }'
done
