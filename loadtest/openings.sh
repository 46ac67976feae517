#!/bin/bash
# CPU per opening: 10,000 murmur.WatchSession openings on one worker (RESULTS.md, run 8).
# usage: [PYTHON=venv/bin/python] [CSSE=/tmp/csse] loadtest/openings.sh CHECKOUT PORT; prints the worker CPU ticks (1/100 s)
TREE=$1; PORT=$2; PYTHON=${PYTHON:-python3}
ulimit -n 65536
cd $TREE
taskset -c 0 $PYTHON -m gateway --bind 127.0.0.1:$PORT --workers 1 --metrics-bind off \
  --max-connections 20000 --max-streams-per-client 100000 --client-request-rate 1000000 --header-timeout 120 \
  > /tmp/openings-gw.log 2>&1 &
GW=$!
for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$PORT/readyz && break; sleep 0.2; done
sleep 1
WPID=$(pgrep -P $GW -f "worker 0" | head -1)
[ -z "$WPID" ] && WPID=$(ps -o pid=,args= --ppid $GW | grep "worker" | awk '{print $1}' | head -1)
cpu() { python3 -c "import sys;f=open(\"/proc/$WPID/stat\").read().rsplit(\")\",1)[1].split();print(int(f[11])+int(f[12]))"; }
B=$(cpu)
rm -f /tmp/open-ready.json
taskset -c 1 ${CSSE:-/tmp/open-csse} -n 10000 --connect-concurrency 1000 --mode post --duration 1 --ready-file /tmp/open-ready.json \
   --out /tmp/open-csse-out.json http://127.0.0.1:$PORT/ > /dev/null 2>/tmp/open-csse-err.log
A=$(cpu)
CONNECTED=$(python3 -c "import json;d=json.load(open('/tmp/open-csse-out.json'));print({k:v for k,v in d.items() if 'conn' in k or 'open' in k or 'refused' in k or 'error' in k})" 2>/dev/null)
echo "$TREE worker=$WPID cpu_ticks=$((A-B)) $CONNECTED"
kill -TERM $GW; wait $GW 2>/dev/null
