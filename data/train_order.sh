#!/usr/bin/env bash
# Rebuilds the zero-trial pass's orderer (src/autosearch/pretrained/order, MODEL_CARD_order.md):
# the `pretrained` recipe on every CPU's stores named below, the families DEP, CAP, NRM and SFM
# held out of all of them (as every shipped prior holds them out), and BERT-base's tasks taken
# out of the stores added for the Intel `rocketlake` (their keys: the tasks of
# data/runs/shortlists_bert_base_rocketlake.db.xz), so that its measured shortlists on that CPU
# stay a held-out check. ~12 minutes on 2 cores.
# Usage: bash data/train_order.sh [OUT] from the repository's root (OUT default: a new model
# directory under /tmp; copy its files over src/autosearch/pretrained/order to ship it).
set -euo pipefail
OUT=${1:-$(mktemp -d)/order}
ROOT=$(pwd)
AS=${AUTOSEARCH:-$ROOT/.venv/bin/autosearch}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# the stores of the first orderer (AMD Zen 3, 4 and 5, Intel emeraldrapids)
FIRST="reference_znver3 zoo_znver3 nchw_emeraldrapids devices runs/mobilenet_v2_10min_after_znver3
runs/mobilenet_v2_10min_before_znver3 runs/mobilenet_v2_10min_one_layout_first_znver3
runs/mobilenet_v2_10min_one_layout_znver3 runs/mobilenet_v2_10min_pooled_znver3
runs/mobilenet_v2_10min_unpooled_znver3 runs/shortlists_mobilenet_v2_znver3"
# added on the rocketlake (2026-12-06): its reference and zoo stores, Zen 4's zoo store, and six
# of its 10-minute network runs (every fp32 model but BERT-base)
ADDED="reference_rocketlake zoo_rocketlake zoo_znver4 runs/resnet50_siblings_10min_rocketlake
runs/mobilenet_v2_siblings_10min_rocketlake runs/densenet121_siblings_10min_rocketlake
runs/regnet_y_fixed_spaces_10min_rocketlake runs/shufflenet_v2_fixed_spaces_10min_rocketlake
runs/resnet18_fixed_spaces_10min_rocketlake"
unpack() { xz -dc "data/$1.db.xz" > "$WORK/$(basename "$1").db"; echo "--train-db $WORK/$(basename "$1").db"; }
xz -dc data/reference_two_threads.db.xz > "$WORK/valid.db"
xz -dc data/runs/shortlists_bert_base_rocketlake.db.xz > "$WORK/bert.db"
KEYS=$(sqlite3 "$WORK/bert.db" "SELECT group_concat(quote(key)) FROM workloads")
ARGS=""
for s in $FIRST; do ARGS="$ARGS $(unpack "$s")"; done
for s in $ADDED; do
  ARGS="$ARGS $(unpack "$s")"
  sqlite3 "$WORK/$(basename "$s").db" "DELETE FROM features WHERE measurement_id IN (SELECT m.id FROM
    measurements m JOIN workloads w ON w.id = m.workload_id WHERE w.key IN ($KEYS));
    DELETE FROM measurements WHERE workload_id IN (SELECT id FROM workloads WHERE key IN ($KEYS));"
done
# shellcheck disable=SC2086  # ARGS is a list of options
"$AS" train --model mlp --loss lambdarank -p members=5 -p patience=10 --epochs 40 --db "$WORK/valid.db" $ARGS \
  --holdout DEP,CAP,NRM,SFM --seed 0 --out "$OUT"
echo "train_order: the model is in $OUT"
