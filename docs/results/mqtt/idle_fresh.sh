#!/usr/bin/env bash
set -u
N=5000; OUT=/tmp/mqidle/fresh; mkdir -p $OUT
H=18750; D=18751; M=18752
for round in 1 2 3; do
 for phase in ${PHASES:-native mqtt}; do
  for b in ${BUILDS:-new}; do
    /tmp/mqidle/$b/gw --addr 127.0.0.1:$H --debug-addr 127.0.0.1:$D --mqtt-addr 127.0.0.1:$M --log-level warn >$OUT/gw.log 2>&1 & GW=$!
    m() { curl -s 127.0.0.1:$H/metrics | awk -v k="$1" '$1==k {printf "%.0f\n", $2}'; }
    for _ in $(seq 1 100); do curl -s -o /dev/null 127.0.0.1:$H/metrics && break; sleep 0.1; done
    curl -s -o /dev/null "127.0.0.1:$D/debug/pprof/heap?gc=1"; sleep 1
    h0=$(m go_memstats_heap_inuse_bytes); s0=$(m go_memstats_stack_inuse_bytes); r0=$(m process_resident_memory_bytes)
    case $phase in native|mqtt) args="--mqtt-phases $phase";; tcp) args="--mqtt-phases mosquitto --mosquitto 127.0.0.1:$M";; esac
    /tmp/mqidle/$b/lt idle --target mqtt $args --rounds 1 --url ws://127.0.0.1:$H --subscribers $N --duration 20s --drain 1s --quiet --json > $OUT/lt_${b}_${phase}_$round.json 2>&1 & lt=$!
    for _ in $(seq 1 600); do [ "$(m switchyard_connections)" -ge $((N+1)) ] 2>/dev/null && break; sleep 0.2; done
    sleep 3
    curl -s -o /dev/null "127.0.0.1:$D/debug/pprof/heap?gc=1"; sleep 1
    c=$(m switchyard_connections); h1=$(m go_memstats_heap_inuse_bytes); s1=$(m go_memstats_stack_inuse_bytes); r1=$(m process_resident_memory_bytes)
    awk -v b=$b -v p=$phase -v r=$round -v c=$c -v h=$((h1-h0)) -v s=$((s1-s0)) -v rs=$((r1-r0)) -v l="$(cut -d' ' -f1-3 /proc/loadavg)" \
      'BEGIN{printf "fresh %s round %d %-6s conns %d heap %.1f stack %.1f heap+stack %.1f rss %.1f KiB/conn load %s\n", b, r, p, c, h/c/1024, s/c/1024, (h+s)/c/1024, rs/c/1024, l}'
    kill $lt 2>/dev/null; wait $lt 2>/dev/null
    kill $GW; wait $GW 2>/dev/null
  done
 done
done
