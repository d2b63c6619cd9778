#!/usr/bin/env bash
# Reproduces data/nchw_emeraldrapids.db: random schedules of 17 NCHW convolutions (the layout a
# PyTorch network has once `tune-model` imports it), ResNet-50's and MobileNet-V2's shapes, on this
# machine's CPU with its kernels on every core of the target. Rounds top every workload up to 50,
# 100, 150, then 200 schedules; re-running resumes. Usage: bash data/collect_nchw.sh [DB]
set -euo pipefail
DB=${1:-data/nchw.db}
R=resnet50/conv2d_nchw
M=mobilenetv2/conv2d_nchw
WL="$R/1x64x56x56/k1s1p0/64,$R/1x64x56x56/k3s1p1/64,$R/1x256x56x56/k1s1p0/128,$R/1x128x56x56/k3s2p1/128"
WL="$WL,$R/1x128x28x28/k3s1p1/128,$R/1x512x28x28/k1s1p0/256,$R/1x256x28x28/k3s2p1/256,$R/1x256x14x14/k3s1p1/256"
WL="$WL,$R/1x1024x14x14/k1s1p0/256,$R/1x512x14x14/k3s2p1/512,$R/1x512x7x7/k3s1p1/512,$R/1x256x56x56/k1s2p0/512"
WL="$WL,$M/1x32x112x112/k1s1p0/16,$M/1x24x56x56/k1s1p0/144,$M/1x192x28x28/k1s1p0/32,$M/1x576x14x14/k1s1p0/96"
WL="$WL,$M/1x960x7x7/k1s1p0/320"
for n in ${ROUNDS:-50 100 150 200}; do
  autosearch collect --workloads "$WL" --per-workload "$n" --db "$DB" --repeats 3 --min-repeat-ms 10 --batch-size 16
done
