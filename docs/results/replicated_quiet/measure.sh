#!/usr/bin/env bash
# Replicated publish rates beside raw JetStream on the same servers, in the
# same round (docs/BENCHMARKS.md, "Replicated publishes and idle
# connections on a quiet machine"): R1 on one nats-server; R3 on three
# with one gateway; R3 with two gateways publishing into one topic.
# Switchyard: loadtest fanout, 83-byte records, 4 WebSocket publishers x 64
# outstanding (2 + 2 through two gateways), 1 subscriber, 10 s; raw
# JetStream: loadtest/jsref, 64 outstanding per connection, a fresh stream.
# Needs, in $B (default /tmp/m):
#   go build -o $B/gateway ./cmd/gateway && go build -o $B/loadtest ./loadtest
#   go build -o $B/jsref ./loadtest/jsref
#   go build -o $B/nats-server github.com/nats-io/nats-server/v2
# WHAT=r1|r3g1|r3g2|all, RUNS="1 2 3", PROF=<round> takes a 6 s CPU profile
# of the (first) gateway in that round; O is the output directory. Also
# writes the NATS server's CPU over each R1 phase and, for two gateways,
# each gateway's refused-and-sent-again records (reappends).
# Replicated publish rates beside raw JetStream: R1 one server, R3 one gateway, R3 two gateways.
set -u
B=${B:-/tmp/m}; O=${O:-/tmp/m/rep}; mkdir -p $O
waitport() { for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.05; done; return 1; }
load() { cut -d' ' -f1 /proc/loadavg; }
nconf() { # name port cport clustered
  local d=/tmp/m/ns/$1; mkdir -p $d
  { echo "server_name: $1"; echo "listen: 127.0.0.1:$2"; echo "jetstream { store_dir: \"$d/store\" }"
    if [ "$4" = 1 ]; then echo "cluster { name: repbench, listen: 127.0.0.1:$3, routes: [ nats://127.0.0.1:18611, nats://127.0.0.1:18612, nats://127.0.0.1:18613 ] }"; fi; } > $d/conf
  echo $d/conf
}
r1() { # round
  rm -rf /tmp/m/ns; local c; c=$(nconf s1 18601 0 0)
  $B/nats-server -c $c > $O/r1_ns_$1.log 2>&1 & local ns=$!; waitport 18601
  $B/gateway --engine nats --nats-url nats://127.0.0.1:18601 --nats-prefix jsr1r$1 --addr 127.0.0.1:19571 --debug-addr 127.0.0.1:19581 --log-level warn --stats-interval -1s > $O/r1_gw_$1.log 2>&1 & local gw=$!; waitport 19571
  local l0; l0=$(load)
  local pp=""; if [ "${PROF:-}" = "$1" ]; then (sleep 2; curl -s -o $O/r1_cpu.pprof "http://127.0.0.1:19581/debug/pprof/profile?seconds=6") & pp=$!; fi
  local n0 n1 n2 n3; n0=$(awk '{print $14+$15}' /proc/$ns/stat)
  $B/loadtest fanout --url ws://127.0.0.1:19571 --subscribers 1 --publishers 4 --rate 0 --duration 10s --size 83 --server-pid $gw --quiet > $O/r1_sy_$1.txt 2>&1
  n1=$(awk '{print $14+$15}' /proc/$ns/stat)
  [ -n "$pp" ] && wait $pp; kill $gw; wait $gw 2>/dev/null
  n2=$(awk '{print $14+$15}' /proc/$ns/stat)
  /usr/bin/time -f "jsref cpu %U %S" $B/jsref --url nats://127.0.0.1:18601 --stream jsrefr1r$1 --replicas 1 --size 83 --duration 10s --window 64 --publishers 1 > $O/r1_js_$1.txt 2>&1
  n3=$(awk '{print $14+$15}' /proc/$ns/stat)
  echo "nats cpu ticks: switchyard phase $((n1-n0)), raw phase $((n3-n2))" >> $O/r1_nscpu_$1.txt
  echo "r1 round $1 load $l0 -> $(load)" >> $O/load.txt
  kill $ns; wait $ns 2>/dev/null
}
r3() { # round gateways
  rm -rf /tmp/m/ns; local ns=() i
  for i in 1 2 3; do $B/nats-server -c $(nconf n$i 1860$i 1861$i 1) > $O/r3_ns${i}_$1.log 2>&1 & ns+=($!); done
  for i in 1 2 3; do waitport 1860$i; done
  sleep 3 # cluster forms (meta leader)
  local urls=nats://127.0.0.1:18601,nats://127.0.0.1:18602,nats://127.0.0.1:18603
  local l0; l0=$(load)
  if [ $2 = 1 ]; then
    $B/gateway --engine nats --nats-url $urls --nats-replicas 3 --nats-prefix r3g1r$1 --addr 127.0.0.1:19572 --debug-addr 127.0.0.1:19582 --log-level warn --stats-interval -1s > $O/r3g1_gw_$1.log 2>&1 & local gw=$!; waitport 19572
    local pp=""; if [ "${PROF:-}" = "$1" ]; then (sleep 2; curl -s -o $O/r3g1_cpu.pprof "http://127.0.0.1:19582/debug/pprof/profile?seconds=6") & pp=$!; fi
    $B/loadtest fanout --url ws://127.0.0.1:19572 --subscribers 1 --publishers 4 --rate 0 --duration 10s --size 83 --server-pid $gw --quiet > $O/r3g1_sy_$1.txt 2>&1
    [ -n "$pp" ] && wait $pp; kill $gw; wait $gw 2>/dev/null
    $B/jsref --url $urls --stream jsrefr3g1r$1 --replicas 3 --size 83 --duration 10s --window 64 --publishers 1 > $O/r3g1_js_$1.txt 2>&1
    echo "r3 one gateway round $1 load $l0 -> $(load)" >> $O/load.txt
  else
    $B/gateway --engine nats --nats-url nats://127.0.0.1:18601 --nats-replicas 3 --nats-prefix r3g2r$1 --addr 127.0.0.1:19573 --debug-addr 127.0.0.1:19583 --log-level warn --stats-interval -1s > $O/r3g2_gwa_$1.log 2>&1 & local ga=$!
    waitport 19573
    $B/gateway --engine nats --nats-url nats://127.0.0.1:18602 --nats-replicas 3 --nats-prefix r3g2r$1 --addr 127.0.0.1:19574 --debug-addr 127.0.0.1:19584 --log-level warn --stats-interval -1s > $O/r3g2_gwb_$1.log 2>&1 & local gb=$!
    waitport 19574
    local pp=""; if [ "${PROF:-}" = "$1" ]; then (sleep 2; curl -s -o $O/r3g2_cpu.pprof "http://127.0.0.1:19583/debug/pprof/profile?seconds=6") & pp=$!; fi
    $B/loadtest fanout --url ws://127.0.0.1:19573 --subscribers 1 --publishers 2 --rate 0 --duration 10s --size 83 --topic-prefix lt.two$1 --server-pid $ga --quiet > $O/r3g2_sya_$1.txt 2>&1 &
    local la=$!
    $B/loadtest fanout --url ws://127.0.0.1:19574 --subscribers 0 --publishers 2 --rate 0 --duration 10s --size 83 --topic-prefix lt.two$1 --server-pid $gb --quiet > $O/r3g2_syb_$1.txt 2>&1
    wait $la; [ -n "$pp" ] && wait $pp
    curl -s http://127.0.0.1:19573/metrics | grep -E "reappend|appends_total|publishes_total" > $O/r3g2_metrics_a_$1.txt
    curl -s http://127.0.0.1:19574/metrics | grep -E "reappend|appends_total|publishes_total" > $O/r3g2_metrics_b_$1.txt
    kill $ga $gb; wait $ga $gb 2>/dev/null
    $B/jsref --url nats://127.0.0.1:18601,nats://127.0.0.1:18602 --stream jsrefr3g2r$1 --replicas 3 --size 83 --duration 10s --window 64 --publishers 2 > $O/r3g2_js_$1.txt 2>&1
    echo "r3 two gateways round $1 load $l0 -> $(load)" >> $O/load.txt
  fi
  kill ${ns[@]}; wait ${ns[@]} 2>/dev/null
}
for r in ${RUNS:-1 2 3}; do
  case ${WHAT:-all} in r1) r1 $r;; r3g1) r3 $r 1;; r3g2) r3 $r 2;; all) r1 $r; r3 $r 1; r3 $r 2;; esac
done
rm -rf /tmp/m/ns
echo DONE >> $O/load.txt
