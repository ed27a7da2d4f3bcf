#!/usr/bin/env bash
# The multi-host cases run through netns_bed.sh (one ctest each): cases.sh MH_RANK CASE.
# Exit 0 when the case holds, 1 when it does not (saying why), 77 when the bed cannot run here.
set -u
prog=$1 case=$2
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d "${TMPDIR:-/tmp}/shardrec-mh-$case.XXXXXX")
trap 'rm -rf "$out"' EXIT

fail() { echo "FAIL ($case): $*" >&2; for f in "$out"/*/rank*.log; do [[ -f $f ]] && { echo "== $f"; cat "$f"; }; done >&2; exit 1; }
# bed NAME [bed options] -- program...: runs the bed into $out/NAME; 77 passes through.
bed() {
  local name=$1
  shift
  "$here/netns_bed.sh" --out "$out/$name" "$@"
  local rc=$?
  [[ $rc -eq 77 ]] && exit 77
  [[ $rc -eq 0 ]] || fail "the bed failed ($rc)"
}
rc_of() { cat "$out/$1/rank$2.rc" 2>/dev/null || echo missing; }
ms_of() { cat "$out/$1/rank$2.ms" 2>/dev/null || echo 999999; }
all_ok() {
  local r
  for ((r = 0; r < $2; ++r)); do [[ $(rc_of "$1" "$r") == 0 ]] || fail "$1: rank $r exited $(rc_of "$1" "$r")"; done
}
# survivors_fail NAME FIRST LAST MAX_MS REGEX: ranks FIRST..LAST failed with a library error,
# the failing call within MAX_MS, their message matching REGEX.
survivors_fail() {
  local r
  for ((r = $2; r <= $3; ++r)); do
    [[ $(rc_of "$1" "$r") == 3 ]] || fail "$1: rank $r exited $(rc_of "$1" "$r"), expected a library error (3)"
    # The failing call's own time where the rank printed it (steps), else the whole run's.
    local ms
    ms=$(sed -n 's/.*failed after \([0-9]*\) ms.*/\1/p' "$out/$1/rank$r.log" | head -1)
    [[ -n $ms ]] || ms=$(ms_of "$1" "$r")
    [[ $ms -le $4 ]] || fail "$1: rank $r took $ms ms to fail, more than $4"
    grep -Eq "$5" "$out/$1/rank$r.log" || fail "$1: rank $r's message does not match '$5'"
  done
}

case "$case" in
  info)  # local rank and size from LOCAL_*, and without them (the namespaces share a host name)
    bed local --hosts 2 --ranks 2 --limit 30 -- "$prog" info
    all_ok local 4
    bed derived --hosts 2 --ranks 2 --limit 30 --no-local -- "$prog" info
    all_ok derived 4
    bed derived3 --hosts 3 --ranks 2 --limit 30 --no-local -- "$prog" info
    all_ok derived3 6 ;;
  shard | shard_dynamic)  # every sharding type across hosts equals one process, bit for bit
    flag=""
    [[ $case == shard_dynamic ]] && flag=--dynamic
    bed hosts --hosts 2 --ranks 2 --limit 60 --no-local -- "$prog" shard $flag
    all_ok hosts 4
    grep -q "^ranks_per_node 2$" "$out/hosts/rank0.log" || fail "ranks_per_node is not 2"
    # The one process exchanges flat (SHARDREC_HOST_REDUCE=0): the hosts' table-row-wise and
    # grid sums, reduced inside each host first, must still equal it bit for bit.
    SHARDREC_HOST_REDUCE=0 "$prog" shard $flag --local 4 --rpn 2 >"$out/one.txt" ||
      fail "the one-process run failed"
    diff <(grep '^sums' "$out/hosts/rank0.log") <(grep '^sums' "$out/one.txt") ||
      fail "the sums across hosts differ from one process's"
    [[ $(grep -c '^sums' "$out/one.txt") -eq 7 ]] || fail "not every sharding type ran" ;;
  loopback_master)  # rank 0 given 127.0.0.1, the others its interface address: they meet
    bed lo --hosts 2 --ranks 2 --limit 30 --rank0-addr loopback --no-local -- "$prog" info
    all_ok lo 4 ;;
  tcp)  # rank 0's address handed in code (shardrec_comm_create_tcp), no launcher variables left
    # (rank 0 given 127.0.0.1, the others host 0's address; local rank and size from the hosts)
    bed tcp --hosts 2 --ranks 2 --limit 30 --no-local --rank0-addr loopback \
      --env SHARDREC_BED_TCP=1 -- "$prog" info
    all_ok tcp 4
    for r in 0 1 2 3; do
      grep -q "^create_tcp .* rank $r of 4$" "$out/tcp/rank$r.log" || fail "rank $r did not use create_tcp"
    done ;;
  trainjob)  # Kubeflow Trainer v2's PET_* and the manifest's LOCAL_RANK, no torchrun variables
    bed pet --hosts 2 --ranks 2 --limit 30 --env SHARDREC_BED_PET=1 -- "$prog" info
    all_ok pet 4
    for r in 0 1 2 3; do
      grep -q "^trainjob PET_NODE_RANK $((r / 2)) LOCAL_RANK $((r % 2))$" "$out/pet/rank$r.log" ||
        fail "rank $r did not run as a TrainJob process"
    done ;;
  netbw)  # the inter-host bandwidth measured through a 100 Mbit/s link (12.5 MB/s)
    bed nb --hosts 2 --ranks 1 --limit 30 --rate 100mbit -- "$prog" netbw
    all_ok nb 2
    for r in 0 1; do
      read -r _ written _ measured < <(grep '^inter_node_bandwidth ' "$out/nb/rank$r.log")
      [[ -n ${measured:-} && $written == "$measured" ]] ||
        fail "rank $r: the topology does not carry the measured figure"
      # Half the rate is seen in some runs: with both directions saturated, each direction's
      # acknowledgements queue behind the other's data in tbf's 200 ms queue (multihost.md).
      (( measured >= 5000000 && measured <= 13750000 )) ||
        fail "rank $r measured $measured bytes/s through a 12500000 bytes/s link"
    done
    [[ $(grep '^inter_node' "$out/nb/rank0.log") == $(grep '^inter_node' "$out/nb/rank1.log") ]] ||
      fail "the ranks measured different figures" ;;
  elastic)  # saved on 3 hosts, loaded on 2 (and 2 -> 4): the same table, training goes on
    ck=$out/ck1
    bed s3 --hosts 3 --ranks 1 --limit 60 -- "$prog" ckpt save "$ck"
    all_ok s3 3
    bed l2 --hosts 2 --ranks 1 --limit 60 -- "$prog" ckpt load "$ck"
    all_ok l2 2
    cmp "$ck/save.st" "$ck/load.st" || fail "3 -> 2 hosts: the loaded table differs from the saved"
    ck=$out/ck2
    bed s2 --hosts 2 --ranks 1 --limit 60 -- "$prog" ckpt save "$ck"
    all_ok s2 2
    bed l4 --hosts 4 --ranks 1 --limit 60 -- "$prog" ckpt load "$ck"
    all_ok l4 4
    cmp "$ck/save.st" "$ck/load.st" || fail "2 -> 4 hosts: the loaded table differs from the saved" ;;
  host_killed)  # host 1's ranks killed mid-run: host 0's ranks fail at once
    bed k --hosts 2 --ranks 2 --limit 30 --env SHARDREC_BED_TIMEOUT_MS=4000 \
      --fault kill:1:1.5 -- "$prog" steps 400
    # Gloo's broken connection names the peer's address: host 1's (x.x.x.2). A survivor whose
    # broken pair was on the other survivor names host 1 too: the other survivor left its own
    # error (which names host 1) in the store and closed its connections before it returned, and
    # the message quotes it ("rank 1 had failed first: ..."). So does a survivor whose wait was
    # on the other survivor: that closing wakes it (it used to wait out its 4 s timeout). Every
    # survivor fails at once.
    survivors_fail k 0 1 1000 "EREMOTE.*\\[[0-9]+\\.[0-9]+\\.[0-9]+\\.2\\]" ;;
  link_down)  # host 1's link goes down mid-run: every rank fails within its timeout
    bed d --hosts 2 --ranks 2 --limit 30 --env SHARDREC_BED_TIMEOUT_MS=3000 \
      --fault linkdown:1:1.5 -- "$prog" steps 400
    # Within the 3 s timeout plus the 300 ms probe, the two 75 ms note budgets and a step
    # (4000: a sanitizer build on a loaded 2-core machine took 3782 ms once), each side naming
    # the other's ranks and host (host h is x.x.x.(h+1)).
    ip='[0-9]+\.[0-9]+\.[0-9]+'
    survivors_fail d 0 1 4000 "ETIMEOUT.*within 3000 ms.*ranks 2, 3 at $ip\\.2 unreachable"
    survivors_fail d 2 3 4000 "ETIMEOUT.*within 3000 ms.*ranks 0, 1 at $ip\\.1 unreachable" ;;
  partition)  # 4 hosts split 2 | 2: every rank fails within its timeout
    bed p --hosts 4 --ranks 1 --limit 30 --env SHARDREC_BED_TIMEOUT_MS=3000 \
      --fault partition:1.5 -- "$prog" steps 400
    ip='[0-9]+\.[0-9]+\.[0-9]+'
    # A rank whose own-half peer timed out first and exited sees that peer's pair break before
    # its own wait ends: EREMOTE then, naming the other half from its own probe (which runs on a
    # broken connection too) and from the peer's note.
    survivors_fail p 0 1 4000 "E(TIMEOUT|REMOTE).*rank 2 at $ip\\.3; rank 3 at $ip\\.4 unreachable"
    survivors_fail p 2 3 4000 "E(TIMEOUT|REMOTE).*rank 0 at $ip\\.1; rank 1 at $ip\\.2 unreachable" ;;
  late_host)  # host 1 starts after the timeout: rank 0 names every missing rank
    bed l --hosts 2 --ranks 2 --limit 30 --env SHARDREC_BED_TIMEOUT_MS=2000 \
      --fault late:1:4 -- "$prog" info
    survivors_fail l 0 0 3000 "ETIMEOUT.*ranks 2, 3 of 4 did not arrive"
    # Rank 1 waits on rank 0's store, which goes with rank 0: it fails as soon.
    survivors_fail l 1 1 3000 "E(TIMEOUT|REMOTE)" ;;
  host_reduce)  # table-row-wise crosses hosts once per sample, not once per shard
    # mh_bench (2 tables of 64 columns, 256 samples a rank, bags of 4, each table on one host of
    # 2 x 2) counts what host 0's link sends per step, reduced and flat (SHARDREC_HOST_REDUCE=0).
    bench=$(dirname "$prog")/mh_bench
    nocal=SHARDREC_BED_NO_CALIBRATION=1
    # Without calibration the planner's default figures (a fast link) make it choose the flat
    # exchange (planner.cc ChooseHostReduce); SHARDREC_HOST_REDUCE=1 forces the reduced one.
    bed red --hosts 2 --ranks 2 --limit 60 --env $nocal --env SHARDREC_HOST_REDUCE=1 -- "$bench" 4 4
    bed flat --hosts 2 --ranks 2 --limit 60 --env $nocal --env SHARDREC_HOST_REDUCE=0 -- "$bench" 4 4
    all_ok red 4
    all_ok flat 4
    tx() { sed -n 's/.* link_tx_per_step \([0-9]*\).*/\1/p' "$out/$1/rank0.log"; }
    red=$(tx red) flat=$(tx flat)
    [[ -n $red && -n $flat ]] || fail "no link byte counts (is /sys/class/net/eth0 readable?)"
    # Reduced, host 0 sends its table's sums once per remote sample (2 x 256 rows of 64 floats)
    # and its samples' gradients of the other table once each (as many), plus the ids it routes
    # there (512 bags of 4 int64 ids): 278528 bytes of payload, and TCP/IP's headers. Flat, each
    # of the table's 2 shards sends a row for every sample it has ids for (~94 % of them).
    (( red >= 278528 && red <= 278528 * 115 / 100 )) ||
      fail "reduced: host 0's link sent $red bytes a step, expected 278528 + headers"
    (( red * 100 <= flat * 65 )) ||
      fail "reduced: $red bytes a step against $flat flat: not the expected ~0.55x"
    echo "host 0's link per step: reduced $red bytes, flat $flat" ;;
  restart)  # a restarted job meets; a rank left from its previous attempt is refused at once
    # Every rank runs as attempt 1 (TORCHELASTIC_RESTART_COUNT=1); host 1's rank first tries to
    # join as attempt 0 would. Rank 0's store knows its attempt: a rank of an earlier one is
    # refused at once (it waited out its whole timeout before: the port's store might have been
    # a previous session's, going away).
    bed r --hosts 2 --ranks 1 --limit 30 --env TORCHELASTIC_RESTART_COUNT=1 \
      --env SHARDREC_BED_TIMEOUT_MS=8000 -- "$prog" restart
    all_ok r 2
    line=$(grep '^stale attempt 0: ' "$out/r/rank1.log")
    [[ $line =~ EREMOTE\ after\ ([0-9]+)\ ms:.*later\ attempt ]] ||
      fail "r: the stale rank was not refused as of an earlier attempt: '$line'"
    (( BASH_REMATCH[1] <= 2000 )) || fail "r: the stale rank was refused after ${BASH_REMATCH[1]} ms"
    for r in 0 1; do grep -q "^rank $r: met at restart 1$" "$out/r/rank$r.log" || fail "r: rank $r did not meet"; done ;;
  estimate)  # the planner's estimate lands within 2x of the measured step
    # mh_bench calibrates as the ranks run (every rank at once, and a collective round of the
    # whole world: shardrec_topology_calibrate_network) and prints the plan's estimate beside
    # the measured step. Two configurations of the bench table (docs/multihost.md): table-row-wise
    # on unlimited links (the step is collective rounds of 4 processes on 2 cores) and row-wise
    # through 100 Mbit/s links (the link dominates). A miss is run once more before it fails:
    # both figures are taken on a machine shared with whatever else runs.
    bench=$(dirname "$prog")/mh_bench
    within_2x() {  # NAME TYPE [bed options]
      local name=$1 type=$2 try line step est
      shift 2
      for try in 1 2; do
        bed "$name$try" --hosts 2 --ranks 2 --limit 90 "$@" -- "$bench" "$type" 20
        line=$(grep '^bench ' "$out/$name$try/rank0.log")
        read -r step est < <(awk '{print $11, $13}' <<<"$line")
        [[ -n ${est:-} ]] || fail "$name: no bench line"
        echo "$name (try $try): step $step ms, estimate $est ms"
        awk -v s="$step" -v e="$est" 'BEGIN { exit !(e >= s / 2 && e <= 2 * s) }' && return 0
      done
      fail "$name: the estimate $est ms is not within 2x of the measured step $step ms"
    }
    within_2x trw 4
    within_2x rw100 2 --rate 100mbit ;;
  train_restart)  # a checkpointing job (tiered + dynamic tables) loses host 1; restarted, it goes on
    # mh_train: a table-row-wise table and a dynamic row-wise one, both tiered (on disk under a
    # small cache) unless SHARDREC_BED_TIERS says otherwise (the results do not depend on it), a
    # checkpoint every 6 steps into one directory. The reference never fails and exports both
    # tables after each save.
    train=$(dirname "$prog")/mh_train
    ip='[0-9]+\.[0-9]+\.[0-9]+'
    both=SHARDREC_BED_TIERS=2
    bed ref --hosts 2 --ranks 2 --limit 60 --env $both --env SHARDREC_BED_EXPORT_SAVES=1 \
      --env SHARDREC_BED_PAUSE_MS=5 -- "$train" "$out/refd" 30 6
    all_ok ref 4
    # resumed NAME HOSTS RANKS DIR TIERS: resume DIR's checkpoint on HOSTS x RANKS with TIERS
    # tiered tables; the tables just loaded must be the reference's at the checkpoint's step,
    # bit for bit. Prints the step.
    resumed() {
      local name=$1 h=$2 r=$3 d=$4 w=$(($2 * $3)) step t
      bed "$name" --hosts "$h" --ranks "$r" --limit 60 --env SHARDREC_BED_PAUSE_MS=0 \
        --env SHARDREC_BED_TIERS="$5" -- "$train" "$d" 30 6 resume >&2
      all_ok "$name" "$w"
      step=$(sed -n 's/.*loaded the checkpoint of step \([0-9]*\).*/\1/p' "$out/$name/rank0.log")
      [[ -n $step ]] || fail "$name: no checkpoint was loaded"
      for t in big dyn; do
        cmp -s "$d/out/resume$w.$t.st" "$out/refd/out/step$step.$t.st" ||
          fail "$name: table $t loaded on $h x $r differs from the reference's at step $step"
      done
      echo "$step"
    }
    # 1. Host 1 killed mid-run (a step or a save): both survivors fail at once naming host 1.
    # (30 steps 40 ms apart: the kill lands after step 6's save and before the last step.)
    bed k --hosts 2 --ranks 2 --limit 30 --env $both --env SHARDREC_BED_TIMEOUT_MS=4000 \
      --env SHARDREC_BED_PAUSE_MS=40 --fault kill:1:0.8 -- "$train" "$out/kd" 30 6
    survivors_fail k 0 1 1000 "EREMOTE.*\\[$ip\\.2\\]"
    # Restarted on the same 2 x 2 (from a copy): the end state is the reference's, bit for bit.
    mkdir -p "$out/same" && cp -a "$out/kd/ck" "$out/same/" || fail "no checkpoint to copy"
    killed=$(resumed same 2 2 "$out/same" 2) || exit 1
    for t in big dyn; do
      cmp -s "$out/same/out/final4.$t.st" "$out/refd/out/final4.$t.st" ||
        fail "same: table $t after the restart at step $killed differs from the reference's"
    done
    # Elastic: the same checkpoint on 1 host x 2 ranks, into tables held in memory, loads the
    # reference's tables.
    mkdir -p "$out/one" && cp -a "$out/kd/ck" "$out/one/" || fail "no checkpoint to copy"
    resumed one 1 2 "$out/one" 0 >/dev/null || exit 1
    # 2. Host 1 killed in the save after step 12: no half checkpoint is published (the one in
    # the directory is step 6's or, once rank 0 published, step 12's, and loads as it was).
    bed ks --hosts 2 --ranks 2 --limit 30 --env $both --env SHARDREC_BED_TIMEOUT_MS=4000 \
      --env SHARDREC_BED_FAULT_IN_SAVE=kill:1:12:0 -- "$train" "$out/ksd" 30 6
    survivors_fail ks 0 1 1000 "save 12 failed.*EREMOTE.*\\[$ip\\.2\\]"
    step=$(resumed ks1 2 1 "$out/ksd" 2) || exit 1
    [[ $step == 6 || $step == 12 ]] || fail "ks: the checkpoint left is of step $step"
    echo "killed: restarted at step $killed; killed in the save: restarted at step $step" ;;
  save_linkdown)  # host 1's link goes down in a save: every rank fails within its timeout
    train=$(dirname "$prog")/mh_train
    ip='[0-9]+\.[0-9]+\.[0-9]+'
    bed ld --hosts 2 --ranks 2 --limit 30 --env SHARDREC_BED_TIMEOUT_MS=3000 \
      --env SHARDREC_BED_FAULT_IN_SAVE=linkdown:1:6:0 -- "$train" "$out/ldd" 12 6
    # Rank 0 may have published (the save's last agreement) and failed in the next step.
    # (EREMOTE where a rank of its own host timed out first and closed its connections.)
    survivors_fail ld 0 1 4000 "E(TIMEOUT|REMOTE).*ranks 2, 3 at $ip\\.2 unreachable"
    survivors_fail ld 2 3 4000 "save 6 failed.*E(TIMEOUT|REMOTE).*ranks 0, 1 at $ip\\.1 unreachable"
    # With a watchdog that aborts a call after 1 s (timeout 30 s), every rank returns at once.
    bed ab --hosts 2 --ranks 2 --limit 30 --env SHARDREC_BED_TIMEOUT_MS=30000 \
      --env SHARDREC_BED_WATCHDOG_MS=1000 --env SHARDREC_BED_FAULT_IN_SAVE=linkdown:1:6:0 \
      -- "$train" "$out/abd" 12 6
    survivors_fail ab 0 3 1500 "save 6 failed.*EABORTED" ;;
  slow_link)  # a transfer that needs longer than the timeout: the message says it may be that
    # Exporting a table gathers it on every rank: 2.56 MB through a 1 Mbit/s link is ~10 s.
    train=$(dirname "$prog")/mh_train
    bed sl --hosts 2 --ranks 1 --limit 30 --rate 1mbit --env SHARDREC_BED_TIMEOUT_MS=3000 \
      --env SHARDREC_BED_EXPORT_SAVES=1 -- "$train" "$out/sld" 6 6
    # Every rank fails within the timeout, the probe and the export's agreement before its
    # gather (two operations, each with its own timeout). The rank that timed out says the link
    # may be slow: the probe's connection waits behind the data (unreachable) or gets through
    # (every host answered), and neither message may rule the slow link out. (The other may
    # fail first as the timed-out rank closes its connections: EREMOTE; its note need not
    # arrive through the saturated link in time.)
    survivors_fail sl 0 1 4500 "E(TIMEOUT|REMOTE)"
    grep -Eq "ETIMEOUT.*within 3000 ms.*(unreachable|every peer's host answered).*(a slow or congested link|a link too slow or congested)" \
      "$out"/sl/rank*.log || fail "sl: no rank's timeout says the link may be slow" ;;
  *) echo "cases.sh: unknown case $case" >&2; exit 2 ;;
esac
echo "PASS ($case)"
