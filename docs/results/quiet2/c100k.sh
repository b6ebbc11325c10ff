#!/bin/bash
# 100,000 idle connections on this box: 6 gateway processes (the per-process open-file limit is 20,000), one generator each.
# usage: c100k.sh BIN OUTDIR
A=$1; OUT=$2; mkdir -p $OUT
PIDS=(); LTP=()
for i in 0 1 2 3 4 5; do
  $A --addr 127.0.0.1:1860$i --log-level warn > $OUT/c100k-gw$i.log 2>&1 & PIDS+=($!)
done
sleep 2; echo "start load=$(cut -d' ' -f1 /proc/loadavg) $(date +%T)"
for i in 0 1 2 3 4 5; do
  N=${PER:-16667}; [ $i = 5 ] && [ -z "$PER" ] && N=16665
  /tmp/lt idle --url ws://127.0.0.1:1860$i --subscribers $N --duration ${DUR:-60s} --server-pid ${PIDS[$i]} --json --quiet --concurrency ${CONC:-32} --rate ${RATE:-10} > $OUT/c100k-$i.json 2> $OUT/c100k-$i.err & LTP+=($!)
done
# sample the gateways 30 s into the hold
sleep ${SAMPLE:-75}
for i in 0 1 2 3 4 5; do echo "gw$i $(grep -E 'VmRSS|VmHWM|Threads' /proc/${PIDS[$i]}/status | tr -s ' \t' ' ' | tr '\n' ' ') cpu_ticks=$(awk '{print $14+$15}' /proc/${PIDS[$i]}/stat)"; done > $OUT/c100k-sample.txt
wait ${LTP[@]}
echo "end load=$(cut -d' ' -f1 /proc/loadavg) $(date +%T)"
for i in 0 1 2 3 4 5; do kill ${PIDS[$i]}; done; wait 2>/dev/null
python3 - $OUT <<'PY'
import json,sys,glob
out=sys.argv[1]; tot={'connections':0,'connect_errors':0,'disconnects':0,'lost':0,'delivered':0,'rss':0,'cpu':0}; cp=[]
for i in range(6):
    d=json.load(open(f'{out}/c100k-{i}.json'))
    for k in ('connections','connect_errors','disconnects','lost','delivered'): tot[k]+=d[k]
    tot['rss']+=d['server_peak_rss_bytes']; tot['cpu']+=d['server_cpu_s']; cp.append(d['connect_phase_s'])
print(tot, 'connect phases', ['%.1f'%x for x in cp], 'peak KiB/conn %.1f'%(tot['rss']/1024/tot['connections']))
PY
cat $OUT/c100k-sample.txt
