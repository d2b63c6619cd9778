#!/usr/bin/env bash
# Reproduces data/reference.db: the reference dataset of issue 3, collected on this machine's CPU.
# Rounds top workloads up to 50, 100, 150, then 200 schedules, so a time-boxed run still covers
# them evenly. The 45 CORE workloads go to 200 (the norm family's design spaces hold only ~60
# distinct schedules); the 4 SIDE workloads (slow or near-duplicate shapes) stop at 100.
# Re-running resumes. Usage: bash data/collect_reference.sh [DB] [BUDGET_MIN]
set -euo pipefail
DB=${1:-data/reference.db}
BUDGET=${2:-600}
CORE="conv1d_nlc/1x256x64/k3s2p1/128,conv1d_nlc/1x128x128/k1s2p0/256,conv1d_nlc/1x64x256/k5s1p2/256"
CORE="$CORE,conv2d_nhwc/1x56x56x64/k1s1p0/64,batch_matmul/1x128x128x128,batch_matmul/1x512x32x512"
CORE="$CORE,conv2d_nhwc/1x56x56x64/k3s2p1/128/g4,conv2d_nhwc/1x56x56x64/k1s1p0/64/g4,conv2d_nhwc/1x14x14x256/k3s1p1/256/g4"
CORE="$CORE,conv2d_nhwc/1x56x56x64/k1s1p0/64/d2,conv2d_transpose_nhwc/1x32x32x64/k4s2p1/3"
CORE="$CORE,depthwise_conv2d_nhwc/1x112x112x32/k3s1p1,depthwise_conv2d_nhwc/1x112x112x64/k3s2p1"
CORE="$CORE,depthwise_conv2d_nhwc/1x14x14x512/k3s2p1,CAP,norm/1x256x256,norm/1x512x512,norm/1x1024x1024"
CORE="$CORE,softmax/256x256,softmax/512x512,softmax/1024x1024,conv2d_nhwc_bn_relu/1x28x28x128/k1s2p0/256"
CORE="$CORE,transpose_batch_matmul/1x128x12x64,transpose_batch_matmul/1x128x16x64"
CORE="$CORE,mobilenetv2/conv2d_nhwc/1x112x112x32/k1s1p0/16,mobilenetv2/conv2d_nhwc/1x14x14x384/k1s1p0/96"
CORE="$CORE,mobilenetv2/depthwise_conv2d_nhwc/1x56x56x144/k3s1p1,mobilenetv2/dense/1x1280/1000,resnet50/dense/1x2048/1000"
CORE="$CORE,bert/batch_matmul/12x128x128x64,bert/batch_matmul/12x128x64x128,bert/softmax/12x128x128,bert/layer_norm/128x768"
CORE="$CORE,random:4"
CORE="$CORE,conv1d_nlc/1x32x512/k3s1p1/512,depthwise_conv2d_nhwc/1x7x7x1024/k3s1p1,transpose_batch_matmul/1x64x12x128"
CORE="$CORE,mobilenetv2/conv2d_nhwc/1x28x28x144/k1s1p0/32,mobilenetv2/depthwise_conv2d_nhwc/1x28x28x192/k3s2p1"
SIDE="norm/1x4096x1024,softmax/2048x2048,transpose_batch_matmul/1x128x12x128,C2D_WIN_NHWC"
[ -z "${EXTRA_WORKLOADS:-}" ] || CORE="$CORE,$EXTRA_WORKLOADS"
start=$(date +%s)
for n in ${ROUNDS:-50 100 150 200}; do
  left=$(( BUDGET - ($(date +%s) - start) / 60 ))
  [ "$left" -gt 0 ] || break
  wl=$CORE
  [ "$n" -gt 100 ] || wl="$CORE,$SIDE"
  autosearch collect --workloads "$wl" --per-workload "$n" --db "$DB" \
    --repeats 3 --min-repeat-ms 10 --batch-size 16 --budget-minutes "$left"
done
