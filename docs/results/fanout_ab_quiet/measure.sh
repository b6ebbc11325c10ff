#!/usr/bin/env bash
set -u
O=/tmp/m/burst; mkdir -p $O
waitport() { for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.05; done; return 1; }
one() { # target workload round
  local t=$1 w=$2 r=$3 pid url extra="" port
  case $t in
    new) /tmp/m/gateway --addr 127.0.0.1:18791 --log-level warn > $O/gw.log 2>&1 & pid=$!; port=18791; url=ws://127.0.0.1:18791;;
    old) /tmp/m/gateway_old --addr 127.0.0.1:18791 --log-level warn > $O/gw.log 2>&1 & pid=$!; port=18791; url=ws://127.0.0.1:18791;;
    nats) /usr/sbin/nats-server -c /work/main/loadtest/nats-ws.conf > $O/nats.log 2>&1 & pid=$!; port=$(grep -A2 websocket /work/main/loadtest/nats-ws.conf | grep -o '[0-9]\{4,5\}' | head -1); url=ws://127.0.0.1:$port; extra="--target nats";;
  esac
  waitport $port
  local l0; l0=$(cut -d' ' -f1 /proc/loadavg)
  if [ $w = burst ]; then args="--publishers 4 --rate 0 --duration 10s"; else args="--publishers 1 --rate 500 --duration 15s"; fi
  /tmp/m/loadtest fanout $extra --url $url --subscribers 1000 $args --size 83 --server-pid $pid --json > $O/${w}_${t}_$r.json 2> $O/${w}_${t}_$r.err
  kill $pid; wait $pid 2>/dev/null
  echo "$w $t $r load $l0 -> $(cut -d' ' -f1 /proc/loadavg)" >> $O/load.txt
}
for r in 1 2 3; do for w in burst r500; do for t in old new nats; do one $t $w $r; done; done; done
echo DONE >> $O/load.txt
