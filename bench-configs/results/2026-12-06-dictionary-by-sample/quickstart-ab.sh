#!/bin/bash
# A/B: floe's dictionary by sample (default) against a dictionary on every column
# (parquet.dictionary: true), the quickstart pipeline (1M events), alternating.
set -e
FLOE=/work/main/go-shim/cmd/floe/floe
for run in 1 2 3; do
  for arm in sample always; do
    d=$(mktemp -d /tmp/hp/ab/$arm-XXXX)
    sed -e 's/- benchmark:/- noop: {}/' -e '/interval: 5s/d' /work/main/bench-configs/quickstart.yaml > $d/p.yaml
    sed -i -e "/address: 127.0.0.1:4195/d" -e "s/^http:/http:\n  enabled: false/" $d/p.yaml
    if [ $arm = always ]; then
      sed -i 's/^    max_in_flight: 4/    max_in_flight: 4\n    parquet:\n      dictionary: true/' $d/p.yaml
    fi
    cd $d
    /usr/bin/time -f "%U %S %e" -o $d/time $FLOE run p.yaml > $d/log 2>&1 || { echo FAIL; cat $d/log | tail; }
    bytes=$(find $d -name '*.parquet' -printf '%s\n' | awk '{s+=$1} END{print s}')
    echo "$arm run$run user_sys_wall $(cat $d/time) parquet_bytes $bytes"
    cd /tmp/hp/ab
  done
done
