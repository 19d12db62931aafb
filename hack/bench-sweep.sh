#!/usr/bin/env bash
# Runs the benchmark over a grid of target counts (K), pod counts (P) and
# fan-out widths, then plots the results. Each run starts its own sandbox and
# measures the kube-scheduler baseline in the same run.
#
#   hack/bench-sweep.sh [out-dir]        (default bench-results)
#   KS="1 3" PS="100" CANDS="1" hack/bench-sweep.sh
#
# The sweep runs uncapped (-cpu-per-cluster 0: every cluster shares the
# machine, as its tables in docs/benchmarks.md were measured): at K=10 the
# quotas of 11 clusters would add up to more cores than the machine has.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bench-results}"
KS="${KS:-1 3 6 10}"
PS="${PS:-100 1000}"
CANDS="${CANDS:-0 1}"
NODES="${NODES:-4}"
mkdir -p "$OUT"
for cands in $CANDS; do
  for p in $PS; do
    for k in $KS; do
      # Fanning every pod out to every target is only swept at the smallest P.
      if [[ "$cands" == 0 && "$p" != "${PS%% *}" ]]; then continue; fi
      echo "=== K=$k P=$p max-candidates=$cands" >&2
      go run ./test/bench -targets "$k" -nodes "$NODES" -pods "$p" -max-candidates "$cands" -cpu-per-cluster 0 -out "$OUT" | tee -a "$OUT/report.md"
    done
  done
done
go run ./test/bench/plot -in "$OUT" -out docs/img > "$OUT/table.md"
