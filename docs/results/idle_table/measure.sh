#!/usr/bin/env bash
# Idle connections beside NATS, the whole picture in one table
# (docs/BENCHMARKS.md): N (10,000) WebSocket connections with one
# subscription each and the idle scenario's trickle (10 publishes/s over
# 16 topics), held 20 s; rounds of Switchyard then NATS over WebSocket.
# For each server, from the same moments of the hold:
#   idle CPU   user+system ticks of the server between 5 s and 13 s after
#              the loadtest starts (the connect phase is over by then),
#   live heap  HeapAlloc and StackInuse after a forced collection 14 s in
#              (both are Go: Switchyard's --debug-addr, NATS's prof_port),
#   RSS        VmRSS right after that collection, and VmHWM at the end.
# Needs /tmp/gw and /tmp/lt:
#   go build -o /tmp/gw ./cmd/gateway && go build -o /tmp/lt ./loadtest
# N=19900 for the open-file limit; RUNS="1" for one round; SYONLY=1 skips
# NATS. Prints one line per run and writes raw files under $OUT.
set -u
N=${N:-10000}
OUT=${OUT:-/tmp/idle_table}; mkdir -p "$OUT"
cd "$(dirname "$0")/../../.."
TCK=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
heap() { # pprof base URL -> "heapalloc stackinuse"
  curl -s "$1/debug/pprof/heap?gc=1&debug=1" |
    awk '/^# HeapAlloc = /{h=$4} /^# Stack = /{split($4,a,"/"); s=a[1]} END{print h, s}'
}
cat > $OUT/nats.conf <<CONF
listen: "127.0.0.1:18622"
prof_port: 18683
websocket { listen: "127.0.0.1:18680", no_tls: true }
CONF
run() { # target i
  local t=$1 i=$2 pid url extra port prof name
  name=${t}_${N}_$i
  if [ $t = sy ]; then
    /tmp/gw --addr 127.0.0.1:18681 --debug-addr 127.0.0.1:18682 --log-level warn > $OUT/gw.log 2>&1 & pid=$!
    url=ws://127.0.0.1:18681; extra=""; port=18681; prof=http://127.0.0.1:18682
  else
    /usr/sbin/nats-server -c $OUT/nats.conf > $OUT/nats.log 2>&1 & pid=$!
    url=ws://127.0.0.1:18680; extra="--target nats"; port=18680; prof=http://127.0.0.1:18683
  fi
  for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  local load0; load0=$(cut -d' ' -f1 /proc/loadavg)
  /tmp/lt idle $extra --url $url --subscribers $N --duration 20s --server-pid $pid --json > $OUT/$name.json 2> $OUT/$name.err &
  local lt=$! c0 c1 hs rss
  sleep 5; c0=$(cpu $pid)
  sleep 8; c1=$(cpu $pid)
  sleep 1; hs=$(heap $prof)
  rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
  wait $lt
  kill $pid; wait $pid 2>/dev/null
  python3 - "$OUT/$name.json" "$N" "$TCK" "$c0" "$c1" "$rss" $hs "$load0" "$(cut -d' ' -f1 /proc/loadavg)" "$name" <<'PY' | tee $OUT/$name.line
import json, sys
f, n, tck, c0, c1, rss, ha, st, l0, l1, name = sys.argv[1:]
n, tck = int(n), int(tck)
d = json.load(open(f))
idle_us = (int(c1) - int(c0)) / tck * 1e6 / 8 / n   # µs of CPU per connection per second
print(f"{name}: steady RSS {int(rss)/n:.1f} KiB/conn, peak {d.get('server_peak_rss_bytes',0)/1024/n:.1f} KiB/conn, "
      f"live heap {int(ha)/1024/n:.2f} KiB/conn, stacks {int(st)/1024/n:.2f} KiB/conn, "
      f"idle CPU {idle_us:.2f} µs/conn/s, connect {d.get('connect_phase_s',0):.2f} s, "
      f"server CPU run {d.get('server_cpu_s',0):.2f} s, delivered {d.get('delivered')}, lost {d.get('lost')}, "
      f"disconnects {d.get('disconnects')}, load {l0}->{l1}")
PY
}
for i in ${RUNS:-1 2 3}; do run sy $i; [ -n "${SYONLY:-}" ] || run nats $i; done
