#!/usr/bin/env bash
# The multi-device dataset of issue 11: the same workloads measured under device configurations that
# really differ on one machine. Each configuration is its own target (and device fingerprint):
#   host      mcpu=<detected>, num-cores=<physical>       (AVX-512 on znver4)
#   1core     mcpu=<detected>, num-cores=1, TVM_NUM_THREADS=1 (schedules *and* runtime on one core)
#   avx2      mcpu=haswell   (AVX2, no AVX-512)
#   sse2      mcpu=x86-64    (SSE2 only)
# Rounds top every workload up to 25, then 50, 75, 100 schedules per device, so a time-boxed run
# covers all devices evenly. Re-running resumes. Usage: bash data/collect_devices.sh [DB] [BUDGET_MIN]
# DEVICES="host" (default "host 1core avx2 sse2") collects only those configurations; WORKLOADS=
# replaces the workload list (comma-separated, as `collect --workloads`).
set -euo pipefail
DB=${1:-data/devices.db}
BUDGET=${2:-120}
AS=${AUTOSEARCH:-autosearch}
MCPU=$($AS target --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["attrs"]["mcpu"])')
CORES=$($AS target --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["attrs"]["num-cores"])')
WL="batch_matmul/1x128x128x128,batch_matmul/1x512x32x512,conv2d_nhwc/1x56x56x64/k1s1p0/64"
WL="$WL,conv1d_nlc/1x256x64/k3s2p1/128,conv2d_nhwc/1x14x14x256/k3s1p1/256/g4"
WL="$WL,depthwise_conv2d_nhwc/1x112x112x32/k3s1p1,depthwise_conv2d_nhwc/1x14x14x512/k3s2p1"
WL="$WL,softmax/256x256,softmax/512x512,norm/1x256x256,conv2d_capsule_nhwijc/1x16x16x4x4x8/k3s2p1/16"
WL="$WL,mobilenetv2/conv2d_nhwc/1x14x14x384/k1s1p0/96,resnet50/dense/1x2048/1000,bert/batch_matmul/12x128x128x64"
WL="$WL,bert/layer_norm/128x768,transpose_batch_matmul/1x128x12x64,conv2d_nhwc_bn_relu/1x28x28x128/k1s2p0/256,random:4"
WL=${WORKLOADS:-$WL}
start=$(date +%s)
for n in ${ROUNDS:-25 50 75 100}; do
  for dev in ${DEVICES:-host 1core avx2 sse2}; do
    left=$(( BUDGET - ($(date +%s) - start) / 60 ))
    [ "$left" -gt 0 ] || exit 0
    case $dev in
      host)  tgt="{\"kind\":\"llvm\",\"mcpu\":\"$MCPU\",\"num-cores\":$CORES}"; env=() ;;
      1core) tgt="{\"kind\":\"llvm\",\"mcpu\":\"$MCPU\",\"num-cores\":1}"; env=(TVM_NUM_THREADS=1) ;;
      avx2)  tgt="{\"kind\":\"llvm\",\"mcpu\":\"haswell\",\"num-cores\":$CORES}"; env=() ;;
      sse2)  tgt="{\"kind\":\"llvm\",\"mcpu\":\"x86-64\",\"num-cores\":$CORES}"; env=() ;;
    esac
    env "${env[@]}" $AS collect --workloads "$WL" --per-workload "$n" --db "$DB" --target "$tgt" \
      --repeats 3 --min-repeat-ms 10 --batch-size 16 --budget-minutes "$left"
  done
done
