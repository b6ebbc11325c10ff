#!/usr/bin/env bash
# Idle memory per connection: native vs MQTT-over-WebSocket, N idle
# subscribed connections on the gateway at 127.0.0.1:18494 (metrics there,
# pprof on 18495), three interleaved rounds. Prints one line per run.
set -u
N=${N:-5000}
m() { curl -s 127.0.0.1:18494/metrics | awk -v k="$1" '$1==k {printf "%.0f\n", $2}'; }
conns() { m switchyard_connections; }
for round in 1 2 3; do
  for phase in native mqtt; do
    for _ in $(seq 1 300); do [ "$(conns)" = 0 ] && break; sleep 0.2; done
    curl -s -o /dev/null '127.0.0.1:18495/debug/pprof/heap?gc=1'; sleep 1
    h0=$(m go_memstats_heap_inuse_bytes); s0=$(m go_memstats_stack_inuse_bytes); r0=$(m process_resident_memory_bytes)
    /tmp/mqbench/lt idle --target mqtt --mqtt-phases $phase --rounds 1 --url ws://127.0.0.1:18494 --subscribers $N \
      --duration 30s --drain 1s --quiet --json > idle_${phase}_$round.json 2>&1 &
    lt=$!
    for _ in $(seq 1 600); do [ "$(conns)" -ge $((N+1)) ] 2>/dev/null && break; sleep 0.2; done
    sleep 3
    curl -s -o heap_${phase}_$round.pprof '127.0.0.1:18495/debug/pprof/heap?gc=1'; sleep 1
    c=$(conns); h1=$(m go_memstats_heap_inuse_bytes); s1=$(m go_memstats_stack_inuse_bytes); r1=$(m process_resident_memory_bytes)
    g=$(m go_goroutines)
    awk -v p=$phase -v r=$round -v c=$c -v h=$((h1-h0)) -v s=$((s1-s0)) -v rs=$((r1-r0)) -v g=$g -v l="$(cut -d, -f3- /proc/loadavg 2>/dev/null; awk '{print $1}' /proc/loadavg)" \
      'BEGIN{printf "round %d %-6s conns %d heap %.1f KiB/conn stack %.1f KiB/conn heap+stack %.1f KiB/conn rss %.1f KiB/conn goroutines %d load %s\n", r, p, c, h/c/1024, s/c/1024, (h+s)/c/1024, rs/c/1024, g, l}'
    wait $lt
  done
done
