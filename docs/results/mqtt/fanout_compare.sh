#!/usr/bin/env bash
set -u
OUT=/tmp/mqidle/fan; mkdir -p $OUT
declare -A HP GWPID
p=18710
for b in base new; do
  HP[$b]=$p
  /tmp/mqidle/$b/gw --addr 127.0.0.1:$p --log-level warn >$OUT/gw_$b.log 2>&1 &
  GWPID[$b]=$!; p=$((p+10))
done
trap 'kill ${GWPID[base]} ${GWPID[new]} 2>/dev/null' EXIT
sleep 2
for round in 1 2 3; do
  for b in base new; do
    /tmp/mqidle/$b/lt fanout --target mqtt --mqtt-phases native,mqtt --rounds 1 --url ws://127.0.0.1:${HP[$b]} \
      --subscribers 1000 --publishers 4 --window 64 --rate 0 --size 83 --duration 10s --server-pid ${GWPID[$b]} --quiet --json > $OUT/fan_${b}_$round.json 2>$OUT/fan_${b}_$round.err
    python3 -c "
import json,sys
d=json.load(open('$OUT/fan_${b}_$round.json'))
print('$b', 'round', $round, 'median', {k: round(v) for k,v in d['median_deliveries_per_s'].items()}, 'ratios', {k: round(v,3) for k,v in d['ratios'].items()}, 'load', open('/proc/loadavg').read().split()[:3])
"
  done
done
