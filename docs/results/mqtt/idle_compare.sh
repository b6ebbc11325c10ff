#!/usr/bin/env bash
# usage: idle.sh ROUNDS BUILD... ; each BUILD is a dir with gw, lt; gateway per build on ports from ports file
set -u
N=${N:-5000}; ROUNDS=$1; shift
PHASES=${PHASES:-"native mqtt tcp"}
OUT=${OUT:-/tmp/mqidle/out}; mkdir -p $OUT
declare -A HP DP MP GWPID
p=18610
for b in "$@"; do
  HP[$b]=$p; DP[$b]=$((p+1)); MP[$b]=$((p+2)); p=$((p+10))
  /tmp/mqidle/$b/gw --addr 127.0.0.1:${HP[$b]} --debug-addr 127.0.0.1:${DP[$b]} --mqtt-addr 127.0.0.1:${MP[$b]} --log-level warn >$OUT/gw_$b.log 2>&1 &
  GWPID[$b]=$!
done
trap 'for b in "$@"; do kill ${GWPID[$b]} 2>/dev/null; done' EXIT
sleep 2
for round in $(seq 1 $ROUNDS); do
 for phase in $PHASES; do
  for b in "$@"; do
    H=${HP[$b]}; D=${DP[$b]}
    m() { curl -s 127.0.0.1:$H/metrics | awk -v k="$1" '$1==k {printf "%.0f\n", $2}'; }
    conns() { m switchyard_connections; }
    for _ in $(seq 1 300); do [ "$(conns)" = 0 ] && break; sleep 0.2; done
    curl -s -o /dev/null "127.0.0.1:$D/debug/pprof/heap?gc=1"; sleep 1
    h0=$(m go_memstats_heap_inuse_bytes); s0=$(m go_memstats_stack_inuse_bytes); r0=$(m process_resident_memory_bytes)
    case $phase in
      native|mqtt) args="--mqtt-phases $phase";;
      tcp) args="--mqtt-phases mosquitto --mosquitto 127.0.0.1:${MP[$b]}";;
    esac
    /tmp/mqidle/$b/lt idle --target mqtt $args --rounds 1 --url ws://127.0.0.1:$H --subscribers $N \
      --duration ${HOLD:-30s} --drain 1s --quiet --json > $OUT/idle_${b}_${phase}_$round.json 2>&1 &
    lt=$!
    for _ in $(seq 1 600); do [ "$(conns)" -ge $((N+1)) ] 2>/dev/null && break; sleep 0.2; done
    sleep 3
    curl -s -o $OUT/heap_${b}_${phase}_$round.pprof "127.0.0.1:$D/debug/pprof/heap?gc=1"; sleep 1
    c=$(conns); h1=$(m go_memstats_heap_inuse_bytes); s1=$(m go_memstats_stack_inuse_bytes); r1=$(m process_resident_memory_bytes)
    g=$(m go_goroutines)
    awk -v b=$b -v p=$phase -v r=$round -v c=$c -v h=$((h1-h0)) -v s=$((s1-s0)) -v rs=$((r1-r0)) -v g=$g -v l="$(cat /proc/loadavg | cut -d' ' -f1-3)" \
      'BEGIN{printf "%s round %d %-6s conns %d heap %.1f stack %.1f heap+stack %.1f rss %.1f KiB/conn goroutines %d load %s\n", b, r, p, c, h/c/1024, s/c/1024, (h+s)/c/1024, rs/c/1024, g, l}'
    wait $lt
  done
 done
done
