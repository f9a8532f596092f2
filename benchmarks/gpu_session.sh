#!/usr/bin/env bash
# One lease of a GPU machine (the `device` tool): measure compute, run real plans on NCCL, validate them.
# Usage there: bash benchmarks/gpu_session.sh OUTDIR [STAGES]. Results land in /tmp/session and are tarred
# to OUTDIR/session.tgz after every stage, so a run cut short still returns what it did. STAGES (default
# all): a comma list of run-1.3b, run-1.3b-fp8, calibrate, core, gemm, align, fp8, run-2.7b, trace-1.3b, run-qwen,
# trace-qwen (after run-qwen), run-7b, run-1.3b-rc (full recompute), run-wide (a GEMM-heavy 4-layer model of
# hidden 8192), extra (benchmarks/gpu_extra.py: clocks, layouts, grouped GEMMs, long attention), extra2
# (gpu_extra.py: token alignment, the GEMM table with idle between shapes), duty (the power cap against the
# GEMMs' share of the time), power (each kernel class's draw, interleaved with idle time), power2 (the same
# for the 1.3B step's own kernels), trace-1.3b-fp8 (a profiler trace of the FP8 plan), power-1.3b (30 steps of the 1.3B plan, power.draw and
# power.draw.instant every 50 ms). Every execute logs nvidia-smi's SM clock and power every 100 ms to
# power-MODEL.csv. The simpy wheel travels in .whl (the machine has no registry), and for run-1.3b-fp8
# torchao's (pip download torchao==0.18.0 --no-deps -d .whl; it needs torch >= 2.11); torch is the
# machine's own (every wheel is installed with --no-deps).
set -u
OUTDIR=$1; STAGES=${2:-run-1.3b,core,gemm,calibrate,fp8,run-2.7b}
W=/tmp/session; mkdir -p $W
export PYTHONUNBUFFERED=1
pack() { tar czf "$OUTDIR/session.tgz" -C /tmp session; }
stage() { local name=$1 limit=$2; shift 2; echo "=== $name: $*"; local t0=$(date +%s)
  timeout "$limit" "$@" > "$W/$name.log" 2>&1; echo "rc=$? $(( $(date +%s) - t0 )) s" | tee -a "$W/$name.log"
  tail -n 12 "$W/$name.log"; pack; }
run_model() { local m=$1 model=$2; shift 2
  stage plan-$m 60 python3 -m trainplan plan --model $model --cluster hgx-h200 --gpus 1 --gbs 8 --zero 0 "$@" --out $W/plan-$m.json
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 100 > $W/power-$m.csv 2>&1 & local smi=$!
  stage execute-$m 150 python3 -m trainplan execute $W/plan-$m.json --backend nccl --nproc 1 --steps 6 --out $W/results-$m.json
  kill $smi 2>/dev/null
  stage validate-$m 60 python3 -m trainplan validate $W/results-$m.json --cluster hgx-h200
  [ -f $W/h200-calibrated.yaml ] && stage validate-cal-$m 60 python3 -m trainplan validate $W/results-$m.json --cluster $W/h200-calibrated.yaml; }
for whl in .whl/*.whl; do  # one at a time: a wheel this Python cannot take is skipped, not the rest
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$whl" \
    || echo "skipped $whl"; done
python3 --version
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi > $W/nvidia-smi.txt 2>&1
python3 -m pip list 2>/dev/null | grep -iE "^(torch|numpy|pandas|matplotlib|simpy|pyyaml) " > $W/packages.txt
for s in ${STAGES//,/ }; do case $s in
  run-1.3b) run_model gpt3-1.3b gpt3-1.3b ;;
  run-2.7b) run_model gpt3-2.7b gpt3-2.7b ;;
  run-1.3b-fp8) run_model gpt3-1.3b-fp8 gpt3-1.3b --precision fp8 --fp8-recipe torchao
    stage test-fp8 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_executor_fp8.py ;;
  trace-1.3b-fp8) stage plan-gpt3-1.3b-fp8 60 python3 -m trainplan plan --model gpt3-1.3b --cluster hgx-h200 --gpus 1 --gbs 8 \
        --zero 0 --precision fp8 --fp8-recipe torchao --out $W/plan-gpt3-1.3b-fp8.json
    stage trace-run-1.3b-fp8 150 python3 -m trainplan execute $W/plan-gpt3-1.3b-fp8.json --backend nccl --nproc 1 --steps 3 \
        --trace /tmp/trace-fp8 --out /tmp/trace-fp8-results.json
    stage trace-sum-1.3b-fp8 60 python3 benchmarks/trace_kernels.py /tmp/trace-fp8/rank0.json --steps 3 \
        --out $W/trace-kernels-gpt3-1.3b-fp8.json ;;
  run-qwen) run_model qwen2-0.5b tests/data/qwen2-0.5b.config.json --seq 4096 ;;
  run-7b) run_model llama2-7b llama2-7b --mbs 1 ;;
  power-1.3b) stage plan-gpt3-1.3b-long 60 python3 -m trainplan plan --model gpt3-1.3b --cluster hgx-h200 --gpus 1 --gbs 8 \
        --zero 0 --out $W/plan-gpt3-1.3b-long.json
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,power.draw.instant --format=csv -lms 50 > $W/power-instant-gpt3-1.3b-long.csv 2>&1 &
    smi=$!
    stage execute-gpt3-1.3b-long 150 python3 -m trainplan execute $W/plan-gpt3-1.3b-long.json --backend nccl --nproc 1 \
        --steps 30 --out $W/results-gpt3-1.3b-long.json
    kill $smi 2>/dev/null ;;
  run-wide) run_model wide-8192x4 benchmarks/configs/wide-8192x4.config.json --seq 4096 --mbs 2 ;;
  run-1.3b-rc) run_model gpt3-1.3b-rc gpt3-1.3b --recompute full ;;
  extra) stage measure-extra 300 python3 benchmarks/gpu_extra.py --out $W ;;
  duty) stage measure-duty 120 python3 benchmarks/gpu_extra.py --out $W --sections env,duty --tag duty ;;
  power) stage measure-power 150 python3 benchmarks/gpu_extra.py --out $W --sections env,power --tag power ;;
  power2) stage measure-power2 120 python3 benchmarks/gpu_extra.py --out $W --sections env,power2 --tag power2 ;;
  extra2) stage measure-extra2 300 python3 benchmarks/gpu_extra.py --out $W --sections env,tokens,cooled --tag extra2 ;;
  trace-qwen) stage trace-run-qwen 150 python3 -m trainplan execute $W/plan-qwen2-0.5b.json --backend nccl --nproc 1 --steps 3 \
        --trace /tmp/trace-qwen --out /tmp/trace-qwen-results.json
    stage trace-sum-qwen 60 python3 benchmarks/trace_kernels.py /tmp/trace-qwen/rank0.json --steps 3 --out $W/trace-kernels-qwen2-0.5b.json ;;
  trace-1.3b) stage trace-run-1.3b 150 python3 -m trainplan execute $W/plan-gpt3-1.3b.json --backend nccl --nproc 1 --steps 3 \
        --trace /tmp/trace-1.3b --out /tmp/trace-1.3b-results.json
    stage trace-sum-1.3b 60 python3 benchmarks/trace_kernels.py /tmp/trace-1.3b/rank0.json --steps 3 --out $W/trace-kernels-gpt3-1.3b.json
    gzip -9c /tmp/trace-1.3b/rank0.json > /tmp/trace.gz; [ $(stat -c %s /tmp/trace.gz) -lt 15000000 ] && cp /tmp/trace.gz $OUTDIR/trace-gpt3-1.3b.json.gz ;;
  core) stage measure-core 150 python3 benchmarks/gpu_measure.py --out $W --sections env,memory,host,attention --tag core ;;
  gemm) stage measure-gemm 200 python3 benchmarks/gpu_measure.py --out $W --sections gemm --tag gemm ;;
  align) stage measure-align 100 python3 benchmarks/gpu_measure.py --out $W --sections align --tag align ;;
  fp8) stage measure-fp8 150 python3 benchmarks/gpu_measure.py --out $W --sections fp8 --tag fp8 ;;
  calibrate) stage calibrate 150 python3 -m trainplan calibrate --compute --backend nccl --nproc 1 --cluster hgx-h200 --precision bf16 --model gpt3-1.3b --out $W/h200-calibrated.yaml ;;
esac; done
pack
