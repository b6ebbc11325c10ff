#!/usr/bin/env bash
# Idle MQTT sessions beside native ones in the same gateway binary
# (docs/BENCHMARKS.md, "Idle MQTT sessions beside native ones"): N
# connections with one subscription each, held by the loadtest's idle
# scenario in a separate process, one fresh gateway per phase:
#   native  WebSocket subscribers on /v1/ws
#   mqttws  MQTT 5 over WebSocket (GET /mqtt)
#   mqtttcp MQTT 5 over TCP (--mqtt-addr), driven as the loadtest's
#           "mosquitto" phase pointed at the gateway's listener
# Samples the gateway's live heap (go_memstats_heap_alloc_bytes after a
# forced collection), VmRSS and a heap profile before the dials and
# HOLD_AT seconds into the hold. Needs /tmp/mqi_gw and /tmp/mqi_lt:
#   go build -o /tmp/mqi_gw ./cmd/gateway && go build -o /tmp/mqi_lt ./loadtest
# PHASES, RUNS, N, OUT override the defaults; GWENV passes an environment to
# the gateway (GWENV=GODEBUG=memprofilerate=1 for exact profiles); GW
# names another gateway binary.
set -u
N=${N:-5000}
HOLD=${HOLD:-20}
HOLD_AT=${HOLD_AT:-14}
OUT=${OUT:-/tmp/mqttidle}; mkdir -p "$OUT"
HTTP=127.0.0.1:${HTTP_PORT:-27461}
DEBUG=127.0.0.1:${DEBUG_PORT:-27462}
MQTT=127.0.0.1:${MQTT_PORT:-27463}
cd "$(dirname "$0")/../../.."
sample() { # pid name
  local pid=$1 name=$2
  curl -s "http://$DEBUG/debug/pprof/heap?gc=1" > "$OUT/$name.heap.pb.gz"
  curl -s "http://$HTTP/metrics" | grep -E '^(go_goroutines|go_memstats_heap_alloc_bytes|go_memstats_heap_inuse_bytes|go_memstats_stack_inuse_bytes|switchyard_sessions_parked) ' > "$OUT/$name.metrics"
  awk '/VmRSS/ {print $1, $2}' /proc/$pid/status > "$OUT/$name.proc"
  cut -d' ' -f1-3 /proc/loadavg >> "$OUT/$name.proc"
}
run() { # phase i
  local ph=$1 i=$2 pid extra
  env ${GWENV:-X=1} ${GW:-/tmp/mqi_gw} --addr $HTTP --debug-addr $DEBUG --mqtt-addr $MQTT --log-level warn > "$OUT/gw.log" 2>&1 & pid=$!
  for _ in $(seq 1 100); do curl -sf "http://$HTTP/healthz" >/dev/null 2>&1 && break; (exec 3<>/dev/tcp/${HTTP%:*}/${HTTP#*:}) 2>/dev/null && break; sleep 0.1; done
  sleep 1
  if ! kill -0 $pid 2>/dev/null; then echo "gateway did not start:" >&2; cat "$OUT/gw.log" >&2; exit 1; fi
  sample $pid ${ph}_${i}_base
  case $ph in
    native)  extra="--mqtt-phases native" ;;
    mqttws)  extra="--mqtt-phases mqtt" ;;
    mqtttcp) extra="--mqtt-phases mosquitto --mosquitto $MQTT" ;;
  esac
  /tmp/mqi_lt idle --target mqtt $extra --rounds 1 --url ws://$HTTP --subscribers $N \
    --duration ${HOLD}s --server-pid $pid --json > "$OUT/${ph}_$i.json" 2> "$OUT/${ph}_$i.err" &
  local lt=$!
  sleep $HOLD_AT
  sample $pid ${ph}_${i}_hold
  wait $lt
  kill $pid; wait $pid 2>/dev/null
}
[ -n "${REPORT_ONLY:-}" ] || for i in ${RUNS:-1 2 3}; do for ph in ${PHASES:-native mqttws mqtttcp}; do run $ph $i; done; done
# Per connection: (hold - base) / N, for the live heap and VmRSS.
for f in "$OUT"/*_hold.metrics; do
  n=${f%_hold.metrics}
  awk -v n=$N -v name="$(basename $n)" -v la="$(tail -1 ${n}_hold.proc)" '
    FNR == 1 { file++ }
    /^go_memstats_heap_alloc_bytes/ { h[file] = $2 }
    /VmRSS/ { r[file] = $2 * 1024 }
    END { printf "%s heap/conn %.0f B  rss/conn %.0f B  load %s\n", name, (h[2]-h[1])/n, (r[4]-r[3])/n, la }
  ' "${n}_base.metrics" "$f" "${n}_base.proc" "${n}_hold.proc"
done
