#!/usr/bin/env bash
# Idle connections beside NATS (docs/BENCHMARKS.md, "Idle connections at
# 10,000 and 19,900 beside NATS"): N (10,000) WebSocket connections with one
# subscription each, three rounds of Switchyard then NATS; samples the
# server's RSS, and Switchyard's Go figures after a collection, 14 s into
# a 20 s hold. Needs /tmp/gw and /tmp/lt:
#   go build -o /tmp/gw ./cmd/gateway && go build -o /tmp/lt ./loadtest
# GWENV=GOMEMLIMIT=90MiB passes an environment to the gateway; SYONLY=1
# skips NATS; RUNS="1" runs one round.
set -u
N=${N:-10000}
OUT=${OUT:-/tmp/idle28}; mkdir -p "$OUT"
cd "$(dirname "$0")/../../.."
sample() { # pid name
  local pid=$1 name=$2
  awk '/VmHWM|VmRSS/ {print $1, $2}' /proc/$pid/status | tr '\n' ' ' > $OUT/$name.proc
  if [ "$name" != "${name#sy}" ]; then
    curl -s 'http://127.0.0.1:18582/debug/pprof/heap?gc=1' > /dev/null
    curl -s http://127.0.0.1:18581/metrics | grep -E '^(go_goroutines|go_memstats_stack_inuse_bytes|go_memstats_heap_inuse_bytes|go_memstats_heap_alloc_bytes|switchyard_sessions_parked) ' > $OUT/$name.metrics
    awk '/VmHWM|VmRSS/ {print $1, $2}' /proc/$pid/status | tr '\n' ' ' > $OUT/$name.proc_aftergc
  fi
}
run() { # target i
  local t=$1 i=$2 pid
  if [ $t = sy ]; then
    env ${GWENV:-X=1} /tmp/gw --addr 127.0.0.1:18581 --debug-addr 127.0.0.1:18582 --log-level warn > $OUT/gw.log 2>&1 & pid=$!
    url=ws://127.0.0.1:18581; extra=""
    port=18581
  else
    /usr/sbin/nats-server -c loadtest/nats-ws.conf > $OUT/nats.log 2>&1 & pid=$!
    url=ws://127.0.0.1:18480; extra="--target nats"
    port=18480
  fi
  for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  /tmp/lt idle $extra --url $url --subscribers $N --duration 20s --server-pid $pid --json > $OUT/${t}_${N}_$i.json 2> $OUT/${t}_${N}_$i.err &
  local lt=$!
  sleep 14
  sample $pid ${t}_${N}_$i
  wait $lt
  kill $pid; wait $pid 2>/dev/null
  uptime >> $OUT/${t}_${N}_$i.proc
}
for i in ${RUNS:-1 2 3}; do run sy $i; [ -n "${SYONLY:-}" ] || run nats $i; done
echo done
