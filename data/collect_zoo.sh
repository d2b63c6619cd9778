#!/usr/bin/env bash
# The tasks tune-model tunes, collected on this machine's CPU (issue 71: every machine feeds the data
# set): the tasks of four zoo models (examples/zoo.py, with bench/network.py's inputs), imported as
# tune-model imports them, stored under tune-model's workload keys and timed as tune-model times a
# network's tasks (weights flushed from the caches). Rounds top every task up to 16, then 32, then 64
# schedules; within a round each model gets an equal share of the minutes left (what one leaves goes
# to the next), and within a model the costliest tasks (weight x FLOPs) go first, so a short budget
# still covers every model. Re-running resumes. Usage: bash data/collect_zoo.sh [DB] [BUDGET_MIN]
# from the repository's root (DB default: data/zoo_<mcpu>.db; MODELS="NAME:INPUT ..." replaces the
# models, ROUNDS="16 32 64" the rounds; AUTOSEARCH=path/to/autosearch picks the binary;
# PRECISION=int8 or bf16 collects the tasks of tune-model --precision's build, tensorized, into
# data/zoo_<precision>_<mcpu>.db).
set -euo pipefail
AS=${AUTOSEARCH:-autosearch}
MCPU=$($AS target --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["attrs"].get("mcpu", "generic"))')
PRECISION=${PRECISION:-fp32}
if [ "$PRECISION" = fp32 ]; then DB=${1:-data/zoo_$MCPU.db}; else DB=${1:-data/zoo_${PRECISION}_$MCPU.db}; fi
BUDGET=${2:-120}
ZOO=${ZOO:-examples/zoo.py}
MODELS=${MODELS:-"mobilenet_v2:x:float32:1,3,224,224 resnet50:x:float32:1,3,224,224
bert_base:input_ids:int64:1,128:0..30522 llama_small:input_ids:int64:1,128:0..32000"}
end=$(( $(date +%s) + BUDGET * 60 ))
for n in ${ROUNDS:-16 32 64}; do
  set -- $MODELS
  while [ $# -gt 0 ]; do
    model=${1%%:*} input=${1#*:}
    left=$(( end - $(date +%s) ))
    [ "$left" -gt 30 ] || exit 0
    minutes=$(awk -v s="$left" -v m="$#" 'BEGIN { printf "%.2f", s / m / 60 }')
    rc=0
    $AS collect --network "$ZOO:$model" --input "$input" --per-workload "$n" --db "$DB" \
      --precision "$PRECISION" --batch-size 16 --budget-minutes "$minutes" || rc=$?
    [ "$rc" -ne 130 ] || exit 130                                  # Ctrl-C: stop, everything is kept
    [ "$rc" -eq 0 ] || echo "collect_zoo: $model failed (exit $rc); going on" >&2
    shift
  done
done
