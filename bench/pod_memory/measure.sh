#!/bin/bash
# The memory of one `siding run` in local mode, for sizing its pod (docs/deploy.md, "Sizing"):
# the proportional set size (PSS) of the driver, Spark's JVM (it runs in a session of its own,
# so it is found by its command line) and its Python workers, every 3 s, while siding delivers
# 60,000 messages produced at 1,000 msg/s into a 4-partition topic over a gRPC stream to a
# 5-20 ms consumer; `local[*]`, one retry lane and the park lane. Writes samples.txt
# ("seconds pss_mib cpu_s processes" for the driver's tree, then the JVM's) and result.txt
# in a new temporary folder. From a checkout: bench/pod_memory/measure.sh
set -u
WORK=$(mktemp -d); cd "$WORK"; echo "work folder: $WORK"
ROOT=$(cd "$(dirname "$0")/../.." && pwd); export PYTHONPATH=$ROOT/src:$ROOT/sdk/python/src:$ROOT
B=${VENV:-$ROOT/.venv}/bin
$B/siding dev kafka > broker.log 2>&1 & BROKER=$!
for i in $(seq 300); do grep -q bootstrap= broker.log && break; sleep 1; done
BOOT=$(grep -o 'bootstrap=[0-9.:]*' broker.log | head -1 | cut -d= -f2)
PORT=$((50000 + RANDOM % 10000)); CPORT=$((40000 + RANDOM % 10000))
$B/siding sim consumer --listen 127.0.0.1:$PORT --transport grpc --latency 5ms-20ms > consumer.log 2>&1 & CONS=$!
$B/siding sim produce --bootstrap $BOOT --topic mem --count 1 --partitions 4 > /dev/null 2>&1
cat > run.toml <<T
[kafka]
bootstrap = "$BOOT"
[spark]
master = "local[*]"
checkpoint_dir = "$WORK/ckpt"
[control]
listen = "127.0.0.1:$CPORT"
[[route]]
name = "mem"
topic = "mem"
group = "mem"
endpoint = "grpc://127.0.0.1:$PORT"
lanes = [ { delay = "2s", deadline = "10s" } ]
T
rm -rf ckpt
$B/siding run -c run.toml > run.log 2>&1 & RUN=$!
for i in $(seq 300); do curl -sf http://127.0.0.1:$CPORT/health > /dev/null && break; sleep 1; done
echo "healthy after $i s" > result.txt
$B/siding sim produce --bootstrap $BOOT --topic mem --count 60000 --rate 1000 > produce.log 2>&1 &
PROD=$!
t0=$(date +%s)
while [ $(( $(date +%s) - t0 )) -lt 420 ]; do
  JVM=$(pgrep -f "SparkSubmit.*$ROOT/src/siding/pipeline/driver/log4j2" | head -1)
  echo "$(( $(date +%s) - t0 )) $($B/python -m bench.pod_memory.process_tree $RUN) $($B/python -m bench.pod_memory.process_tree ${JVM:-999999999})" >> samples.txt
  sleep 3
  d=$(curl -s http://127.0.0.1:$CPORT/status | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["routes"][0]["delivered"] if d["routes"] else 0)' 2>/dev/null)
  echo "delivered=$d" >> samples.txt
  [ "${d:-0}" -ge 60000 ] && break
done
curl -s http://127.0.0.1:$CPORT/status | python3 -c 'import json,sys; d=json.load(sys.stdin); print("delivered", d["routes"][0]["delivered"])' >> result.txt
uptime >> result.txt
kill -TERM $RUN; wait $RUN; echo "run exit $?" >> result.txt
kill $PROD $CONS $BROKER 2>/dev/null; wait
