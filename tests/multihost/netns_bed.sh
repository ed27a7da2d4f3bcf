#!/usr/bin/env bash
# Many hosts on one machine: H network namespaces on a private bridge (each its own address and
# loopback, optionally its link limited with tc's token-bucket filter), R ranks per host started
# with torchrun's variables, every wait bounded, and everything made torn down on exit.
#
# Usage: netns_bed.sh --hosts H --ranks R --out DIR [options] -- PROGRAM [ARGS...]
#   --rate RATE        limit every host's link both ways (tc tbf; e.g. 1gbit, 100mbit)
#   --limit S          each rank is killed after S seconds (default 60)
#   --no-local         do not set LOCAL_RANK / LOCAL_WORLD_SIZE (ranks must find their host)
#   --rank0-addr A     MASTER_ADDR as rank 0 sees it: "ip" (default) or "loopback" (127.0.0.1)
#   --env K=V          extra variable for every rank (repeatable)
#   --fault SPEC       linkdown:HOST:AFTER_S[:FOR_S] (up again after FOR_S), kill:HOST:AFTER_S,
#                      partition:AFTER_S or late:HOST:DELAY_S (repeatable)
# Each rank writes DIR/rank<r>.log (stdout and stderr), DIR/rank<r>.rc (exit status) and
# DIR/rank<r>.ms (wall time). Host h holds ranks h*R .. h*R+R-1. The bed exits 0 once every rank
# has ended (whatever its status), 77 when this machine cannot make namespaces (the reason on
# stderr), 2 for bad usage, 1 when the bed itself failed.
#
# Only the addresses of the namespaces made here are used: the bridge has no address, so nothing
# of this network is routed from or to the machine's own namespace.
set -u

hosts=0 ranks=0 out="" rate="" limit=60 no_local=0 rank0_addr=ip
extra_env=() faults=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --hosts) hosts=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --no-local) no_local=1; shift ;;
    --rank0-addr) rank0_addr=$2; shift 2 ;;
    --env) extra_env+=("$2"); shift 2 ;;
    --fault) faults+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "netns_bed: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ $hosts -lt 1 || $hosts -gt 16 || $ranks -lt 1 || -z $out || $# -lt 1 ]]; then
  echo "usage: netns_bed.sh --hosts H(1-16) --ranks R --out DIR [options] -- PROGRAM [ARGS...]" >&2
  exit 2
fi

skip() { echo "netns_bed: SKIPPED: $*" >&2; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root to make network namespaces (running as uid $(id -u))"
command -v ip >/dev/null || skip "the ip command (iproute2) is not installed"
if [[ -n $rate || ${#faults[@]} -gt 0 ]]; then
  command -v tc >/dev/null || skip "the tc command (iproute2) is not installed"
fi

# Unique names per run (interface names have at most 15 characters), a private /24 chosen at
# random: it never leaves the bridge, so two runs at once cannot meet even on the same subnet.
id=$(printf '%04x%02x' $((RANDOM % 65536)) $(($$ % 256)))
bridge="srb$id"
net="10.$((200 + RANDOM % 50)).$((RANDOM % 256))"
ns_of() { echo "srbed-$id-h$1"; }
veth_of() { echo "srv${id}h$1"; }
addr_of() { echo "$net.$(($1 + 1))"; }
pids=()

teardown() {
  local h
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for ((h = 0; h < hosts; ++h)); do
    local ns
    ns=$(ns_of "$h")
    # Processes still inside a namespace keep it alive: only ours can be in it.
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
    ip link del "$(veth_of "$h")" 2>/dev/null
  done
  ip link del "$bridge" 2>/dev/null
  ip link del "${bridge}b" 2>/dev/null
}
trap teardown EXIT
trap 'exit 1' INT TERM

ip link add "$bridge" type bridge 2>/dev/null ||
  skip "cannot make a bridge (ip link add type bridge failed: no CAP_NET_ADMIN or no bridge module)"
ip link set "$bridge" up || exit 1
for ((h = 0; h < hosts; ++h)); do
  ns=$(ns_of "$h") veth=$(veth_of "$h")
  ip netns add "$ns" 2>/dev/null || skip "cannot make a network namespace (ip netns add failed)"
  ip link add "$veth" type veth peer name eth0 netns "$ns" || exit 1
  ip link set "$veth" master "$bridge" up || exit 1
  ip -n "$ns" link set lo up || exit 1
  ip -n "$ns" addr add "$(addr_of "$h")/24" dev eth0 || exit 1
  ip -n "$ns" link set eth0 up || exit 1
  if [[ -n $rate ]]; then
    # Both directions: the namespace's side shapes what the host sends, the bridge's side what
    # it receives. A burst of 64 KiB keeps a 100 Mbit/s link's rate within a few percent.
    tc -n "$ns" qdisc add dev eth0 root tbf rate "$rate" burst 64kb latency 200ms || exit 1
    tc qdisc add dev "$veth" root tbf rate "$rate" burst 64kb latency 200ms || exit 1
  fi
done
# Every host reaches every other before any rank starts (bounded: 50 tries of 0.1 s).
for ((h = 1; h < hosts; ++h)); do
  ok=0
  for ((t = 0; t < 50; ++t)); do
    # A refused connection to a closed port proves the path (no ping needed): bash's /dev/tcp.
    msg=$(ip netns exec "$(ns_of "$h")" timeout 1 bash -c "exec 3<>/dev/tcp/$(addr_of 0)/9" 2>&1)
    if [[ $msg == *refused* ]]; then ok=1; break; fi
    sleep 0.1
  done
  [[ $ok -eq 1 ]] || { echo "netns_bed: host $h cannot reach host 0 over the bridge" >&2; exit 1; }
done

mkdir -p "$out" || exit 1
world=$((hosts * ranks))
port=$((20000 + RANDOM % 20000))
master=$(addr_of 0)
echo "netns_bed: $hosts hosts x $ranks ranks on $net.0/24 (bridge $bridge), store $master:$port" \
  "${rate:+, links limited to $rate}" >&2

declare -A late=()
for f in "${faults[@]}"; do
  IFS=: read -r kind a b <<<"$f"
  [[ $kind == late ]] && late[$a]=$b
done

start_rank() {
  local h=$1 l=$2 r=$(($1 * ranks + $2)) delay=${late[$1]:-0} ns addr
  shift 2
  ns=$(ns_of "$h")
  addr=$master
  [[ $r -eq 0 && $rank0_addr == loopback ]] && addr=127.0.0.1
  local vars=(MASTER_ADDR="$addr" MASTER_PORT="$port" RANK="$r" WORLD_SIZE="$world"
    GROUP_RANK="$h" SHARDREC_BED_HOSTS="$hosts" SHARDREC_BED_RANKS="$ranks"
    SHARDREC_BED_HOST="$h" SHARDREC_BED_ADDR="$(addr_of "$h")")
  [[ $no_local -eq 0 ]] && vars+=(LOCAL_RANK="$l" LOCAL_WORLD_SIZE="$ranks")
  (
    [[ $delay != 0 ]] && sleep "$delay"
    t0=$(date +%s%N)
    env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT \
      "${vars[@]}" "${extra_env[@]}" \
      ip netns exec "$ns" timeout -s KILL "$limit" "$@" >"$out/rank$r.log" 2>&1
    echo $? >"$out/rank$r.rc"
    echo $((($(date +%s%N) - t0) / 1000000)) >"$out/rank$r.ms"
  ) &
  pids+=($!)
}

for ((h = 0; h < hosts; ++h)); do
  for ((l = 0; l < ranks; ++l)); do start_rank "$h" "$l" "$@"; done
done

# Faults, each at its time after the start, in the background.
for f in "${faults[@]}"; do
  IFS=: read -r kind a b c <<<"$f"
  case "$kind" in
    linkdown) (sleep "$b"; ip -n "$(ns_of "$a")" link set eth0 down;
               echo "netns_bed: host $a's link down" >&2
               if [[ -n $c ]]; then
                 sleep "$c"; ip -n "$(ns_of "$a")" link set eth0 up; echo "netns_bed: host $a's link up" >&2
               fi) & pids+=($!) ;;
    kill) (sleep "$b"; for p in $(ip netns pids "$(ns_of "$a")"); do kill -KILL "$p"; done;
           echo "netns_bed: host $a's ranks killed" >&2) & pids+=($!) ;;
    partition)
      # Hosts of the second half move to a bridge of their own: each half still meets inside.
      (sleep "$a"; ip link add "${bridge}b" type bridge && ip link set "${bridge}b" up &&
        for ((h = hosts / 2; h < hosts; ++h)); do ip link set "$(veth_of "$h")" master "${bridge}b"; done
        echo "netns_bed: partitioned hosts 0..$((hosts / 2 - 1)) | $((hosts / 2))..$((hosts - 1))" >&2) &
      pids+=($!) ;;
    late) ;;
    *) echo "netns_bed: unknown fault $f" >&2; exit 2 ;;
  esac
done

# Every rank ends by its limit (timeout -s KILL); the wait is bounded by that plus the delays.
for ((r = 0; r < world; ++r)); do wait "${pids[$r]}" 2>/dev/null; done
for ((r = 0; r < world; ++r)); do
  echo "rank $r (host $((r / ranks))): rc $(cat "$out/rank$r.rc" 2>/dev/null || echo '?')" \
    "in $(cat "$out/rank$r.ms" 2>/dev/null || echo '?') ms" >&2
done
exit 0
