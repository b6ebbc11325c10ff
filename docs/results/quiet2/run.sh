#!/bin/bash
# One sitting: burst (2 rounds: before, after, after lean, NATS), rate 200/500 (after, before, NATS), idle 10k (after, NATS).
# usage: run.sh BEFORE_BIN AFTER_BIN OUTDIR
B=$1; A=$2; OUT=$3; mkdir -p $OUT
LT=/tmp/lt
NCONF=/work/main/loadtest/nats-ws.conf
sum() { # tag pid
  W=$(awk '/syscw/{print $2}' /proc/$2/io); C=$(awk '/wchar/{print $2}' /proc/$2/io)
  python3 - "$OUT/$1.json" "$W" "$C" "$1" "$3" <<'PY'
import json,sys
d=json.load(open(sys.argv[1])); w=int(sys.argv[2]); c=int(sys.argv[3])
l=d['latency']; n=max(d['delivered'],1)
print('%-14s load=%s dps=%9.0f cpu/d=%.3f d/write=%5.1f B/d=%5.1f p50=%7.1f p99=%7.1f lost=%d rss=%.0fM gencpu=%.1f'%(sys.argv[4],sys.argv[5],d['deliveries_per_s'],d['server_cpu_us_per_delivery'],n/max(w,1),c/n,l['p50_ms'],l['p99_ms'],d['lost'],d['server_peak_rss_bytes']/2**20,d['client_cpu_s']))
PY
}
gw() { # bin tag ltflags...
  BIN=$1; TAG=$2; shift 2
  $BIN --addr 127.0.0.1:18494 --debug-addr 127.0.0.1:18495 --log-level warn > $OUT/$TAG.log 2>&1 & GP=$!
  sleep 1; L=$(cut -d' ' -f1 /proc/loadavg)
  if [ -n "$PROF" ]; then (sleep 4; curl -s -o $OUT/$TAG.pprof 'http://127.0.0.1:18495/debug/pprof/profile?seconds=5') & PP=$!; fi
  $LT fanout --url ws://127.0.0.1:18494 --server-pid $GP --json --quiet "$@" > $OUT/$TAG.json
  [ -n "$PROF" ] && wait $PP
  sum $TAG $GP $L; kill $GP; wait $GP 2>/dev/null
}
nats() { # tag ltflags...
  TAG=$1; shift
  /usr/sbin/nats-server -c $NCONF > $OUT/$TAG.log 2>&1 & GP=$!
  sleep 1; L=$(cut -d' ' -f1 /proc/loadavg)
  $LT fanout --target nats --url ws://127.0.0.1:18480 --server-pid $GP --json --quiet "$@" > $OUT/$TAG.json
  sum $TAG $GP $L; kill $GP; wait $GP 2>/dev/null
}
BURST="--subscribers 1000 --publishers 4 --window 64 --rate 0 --size 83 --duration 10s"
for r in 1 2; do
  PROF=$([ $r = 1 ] && echo 1) gw $B burst-before$r $BURST
  PROF=$([ $r = 1 ] && echo 1) gw $A burst-after$r $BURST
  gw $A burst-lean$r $BURST --lean
  nats burst-nats$r $BURST
done
for rate in 200 500; do
  R="--subscribers 1000 --publishers 1 --rate $rate --size 83 --duration 10s"
  gw $A rate$rate-after $R
  gw $B rate$rate-before $R
  nats rate$rate-nats $R
done
idle() { # bin tag
  $1 --addr 127.0.0.1:18581 --debug-addr 127.0.0.1:18582 --log-level warn > $OUT/$2.log 2>&1 & GP=$!
  sleep 1; L=$(cut -d' ' -f1 /proc/loadavg)
  $LT idle --url ws://127.0.0.1:18581 --subscribers 10000 --duration 20s --server-pid $GP --json --quiet > $OUT/$2.json
  echo "$2 load=$L"; kill $GP; wait $GP 2>/dev/null
}
idle $A idle-after
/usr/sbin/nats-server -c $NCONF > $OUT/idle-nats.log 2>&1 & GP=$!
sleep 1; L=$(cut -d' ' -f1 /proc/loadavg)
$LT idle --target nats --url ws://127.0.0.1:18480 --subscribers 10000 --duration 20s --server-pid $GP --json --quiet > $OUT/idle-nats.json
echo "idle-nats load=$L"; kill $GP; wait $GP 2>/dev/null
