#!/usr/bin/env bash
# Reproduces data/reference.db: the reference dataset of issue 3, collected on this machine's CPU.
# Rounds top every workload up to 50, then 100, 150, 200 schedules, so a time-boxed run still
# covers every workload evenly. Re-running resumes. Usage: bash data/collect_reference.sh [DB] [BUDGET_MIN]
set -euo pipefail
DB=${1:-data/reference.db}
BUDGET=${2:-600}
WL="conv1d_nlc/1x256x64/k3s2p1/128,conv1d_nlc/1x128x128/k1s2p0/256,conv1d_nlc/1x64x256/k5s1p2/256,conv1d_nlc/1x32x512/k3s1p1/512"
WL="$WL,conv2d_nhwc/1x56x56x64/k1s1p0/64,batch_matmul/1x128x128x128,batch_matmul/1x512x32x512"
WL="$WL,conv2d_nhwc/1x56x56x64/k3s2p1/128/g4,conv2d_nhwc/1x56x56x64/k1s1p0/64/g4,conv2d_nhwc/1x14x14x256/k3s1p1/256/g4"
WL="$WL,conv2d_nhwc/1x56x56x64/k1s1p0/64/d2,DEP,conv2d_transpose_nhwc/1x32x32x64/k4s2p1/3,CAP,NRM,SFM"
WL="$WL,conv2d_nhwc_bn_relu/1x28x28x128/k1s2p0/256,TBG,C2D_WIN_NHWC"
WL="$WL,mobilenetv2/conv2d_nhwc/1x112x112x32/k1s1p0/16,mobilenetv2/conv2d_nhwc/1x28x28x144/k1s1p0/32"
WL="$WL,mobilenetv2/conv2d_nhwc/1x14x14x384/k1s1p0/96,mobilenetv2/depthwise_conv2d_nhwc/1x56x56x144/k3s1p1"
WL="$WL,mobilenetv2/depthwise_conv2d_nhwc/1x28x28x192/k3s2p1,mobilenetv2/dense/1x1280/1000,resnet50/dense/1x2048/1000"
WL="$WL,bert/batch_matmul/12x128x128x64,bert/batch_matmul/12x128x64x128,bert/softmax/12x128x128,bert/layer_norm/128x768"
WL="$WL,${EXTRA_WORKLOADS:-}"
WL="${WL%,}"
start=$(date +%s)
for n in ${ROUNDS:-50 100 150 200}; do
  left=$(( BUDGET - ($(date +%s) - start) / 60 ))
  [ "$left" -gt 0 ] || break
  autosearch collect --workloads "$WL" --per-workload "$n" --db "$DB" \
    --repeat 3 --min-repeat-ms 10 --batch-size 16 --budget-minutes "$left"
done
