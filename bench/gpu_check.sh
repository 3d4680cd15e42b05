#!/usr/bin/env bash
# bench/gpu_check.sh - the project's checks on one GPU machine (16 cores, no internet), inside a time budget it
# enforces: the CUDA tests, bench/bench_gpu.py for both models, run.py --gpus 1 end to end for both tasks, the
# trained runs' checkpoints used by `run.py tag` / `run.py translate` in a CPU-only process (CUDA_VISIBLE_DEVICES=),
# then, while the budget lasts, the compiled NMT engine step and NMT with Adam.
#
# Run from the repository root:
#   OUT=/tmp/gpu-check HOGWILD_CORPORA=/path/to/corpora HOGWILD_WHEELS=/path/to/wheels bash bench/gpu_check.sh
#   HOGWILD_GPU_CHECK_CPU=1 BUDGET_S=300 bash bench/gpu_check.sh    # every step on the CPU, tiny sizes: tests this
#                                                                    # script where there is no GPU
# Writes under $OUT: <step>.log for every step, bench-{pos,nmt,compiled,adam}.json (every measurement), runs/<task>/
# (summary.json, config.json, metrics.jsonl; the checkpoints stay in a temporary folder), gpu-samples.csv
# (nvidia-smi every 0.5 s, GPU mode) and summary.txt: one line per step, `<step> <ok|failed (rc N)|timed out|
# skipped (why)> <seconds>s`, then the total. Exit status 0 when no step failed or timed out, else 1.
# Each step runs under `timeout` = min(its own limit, what is left of BUDGET_S); a step whose minimum no longer fits
# is skipped and says so, so the whole check ends within BUDGET_S (steps run in priority order). The device tool
# brings back at most 8 files: there, run with OUT=/tmp/gc and `tar czf "$OUT/gpu-check.tgz" -C /tmp gc` after it.
#
# Everything it needs, named here:
PYTHON=${PYTHON:-python3}                  # the python holding torch with CUDA (the GPU image's python3)
WHEELS=${HOGWILD_WHEELS:-}                 # a folder of wheels, installed offline (--no-deps) when given: the
WHEELS_NEEDED=(sacremoses conllu)          # modules run.py needs that the GPU image lacks (sacremoses' own needs,
#                                            click, joblib, regex and tqdm, are on it). Fetch them where pip works:
#                                            pip download --no-deps -d WHEELS sacremoses conllu  (pure-Python wheels)
CORPORA=${HOGWILD_CORPORA:-$(dirname "$PWD")/shared/corpora}  # brown/ and europarl-fr-en/; without: synthetic runs
OUT=${OUT:-/tmp/gpu-check}
BUDGET_S=${BUDGET_S:-510}                  # the whole check, seconds (8.5 minutes)
CPU_MODE=${HOGWILD_GPU_CHECK_CPU:-0}       # 1: every step on the CPU with tiny sizes
GRACE=5                                    # a step past its limit gets SIGTERM, then SIGKILL this much later
set -u -o pipefail

START_S=$SECONDS
FAILED=0

# step NAME WANT MIN CMD...: run CMD (in its own process group, output to $OUT/NAME.log) under timeout
# min(WANT, seconds left); skip it when fewer than MIN seconds are left. One summary line per step.
step() {
    local name=$1 want=$2 min=$3 left limit began rc status
    shift 3
    left=$(( BUDGET_S - (SECONDS - START_S) - GRACE ))
    limit=$(( want < left ? want : left ))
    if (( limit < min )); then
        printf '%-12s skipped (%ss left, needs %ss) 0s\n' "$name" "$(( left > 0 ? left : 0 ))" "$min" \
            | tee -a "$OUT/summary.txt"
        return 0
    fi
    echo "=== $name (limit ${limit}s, $(( SECONDS - START_S ))s into the check): $*"
    began=$SECONDS
    timeout -k "$GRACE" "$limit" "$@" > "$OUT/$name.log" 2>&1 < /dev/null
    rc=$?
    case $rc in
        0) status=ok ;;
        124|137) status="timed out (limit ${limit}s)"; FAILED=1 ;;
        *) status="failed (rc $rc)"; FAILED=1 ;;
    esac
    tail -n 4 "$OUT/$name.log" | sed 's/^/    /'
    printf '%-12s %s %ss\n' "$name" "$status" "$(( SECONDS - began ))" | tee -a "$OUT/summary.txt"
}

finish() {
    [ -n "${SMI_PID:-}" ] && kill "$SMI_PID" 2>/dev/null
    printf 'total        %ss of a %ss budget\n' "$(( SECONDS - START_S ))" "$BUDGET_S" | tee -a "$OUT/summary.txt"
}

# Copies a run's small files (no checkpoints) under $OUT/runs.
keep_run() {
    local run=$1 name
    name=$(basename "$run")
    mkdir -p "$OUT/runs/$name"
    for f in summary.json config.json metrics.jsonl dev.hyp; do
        [ -f "$run/$f" ] && cp "$run/$f" "$OUT/runs/$name/"
    done
    return 0
}

main() {
    if [ ! -f run.py ] || [ ! -f bench/bench_gpu.py ]; then
        echo "gpu_check: run me from the hogwild repository root (run.py, bench/bench_gpu.py)" >&2
        exit 2
    fi
    mkdir -p "$OUT"
    : > "$OUT/summary.txt"
    local runs
    runs=$(mktemp -d /tmp/gpu-check-runs.XXXXXX)
    export PYTHONUNBUFFERED=1 HOGWILD_CORPORA=$CORPORA HOGWILD_TRACEBACK=1
    export HOGWILD_CACHE=${HOGWILD_CACHE:-/tmp/hogwild-cache}   # tokenized corpora: bench and runs share it
    trap finish EXIT

    step env 30 5 bash -c "date -u; git rev-parse HEAD 2>/dev/null; nproc; free -g | head -2; \
        nvidia-smi 2>&1 | head -15; $PYTHON -c 'import torch; print(torch.__version__, torch.version.cuda, \
        torch.cuda.is_available(), torch.cuda.device_count())'; \
        ls $CORPORA 2>&1 || echo \"no corpora at $CORPORA: synthetic runs\""
    if [ -n "$WHEELS" ]; then
        step wheels 60 10 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target /tmp/hogwild-site \
            "$WHEELS"/*.whl
        export PYTHONPATH=/tmp/hogwild-site${PYTHONPATH:+:$PYTHONPATH}
    fi
    step modules 30 5 "$PYTHON" -c "import importlib; [importlib.import_module(m) for m in '${WHEELS_NEEDED[*]}'.split()]"

    local tests device run_gpu pos_data nmt_data bench_args bench_nmt bench_pos
    if [ "$CPU_MODE" = 1 ]; then
        tests=(-m cuda tests/hogwild/test_gpu.py)   # skipped without CUDA: the step itself is what is tested here
        device=cpu
        bench_args=(--quick --variants plain,engine --workers 1)
        bench_nmt=() bench_pos=()
        run_gpu=(--workers 1 --cpu-workers replica)   # the GPU workers' code path ('cpu-replica')
        pos_data=(--steps 20 --synthetic-size 200 --eval-every 100000)
        nmt_data=(--steps 6 --synthetic-size 200 --batch-size 8 --dev-limit 20 --eval-every 100000 --beam 2)
    else
        if ! "$PYTHON" -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
            echo "gpu_check: $PYTHON's torch sees no GPU (HOGWILD_GPU_CHECK_CPU=1 runs the steps on the CPU)" \
                | tee -a "$OUT/summary.txt"
            exit 3
        fi
        # The tests that need CUDA (marked `cuda` by tests/conftest.py from their skip reason), less two that the
        # steps below run in full: test_bench_gpu.py's GPU case (the bench steps) and run.py --gpus 1 end to end with
        # tag/translate on a CPU-only process (run-pos, run-nmt, tag, translate, on the real corpora).
        tests=(-m cuda --deselect tests/bench/test_bench_gpu.py::test_quick_run_on_a_gpu_with_every_variant
               --deselect tests/hogwild/test_gpu.py::test_run_py_gpus_1_end_to_end_then_tag_or_translate_on_a_cpu_only_process
               tests)
        device=cuda:0
        bench_args=(--workers 1,2,4 --repeats 2)
        # POS without the compiled plain loop: its compilation took most of the step's 90 s (2026-11-26)
        bench_nmt=(--updates 60) bench_pos=(--updates 150 --variants plain,plain-tf32,engine)
        run_gpu=(--gpus 1)
        pos_data=(--preset paper --time-limit 30 --dev-limit 200 --eval-every 100000)
        nmt_data=(--preset paper --time-limit 30 --dev-limit 100 --eval-every 100000 --beam 2)
        [ -d "$CORPORA/brown" ] && pos_data+=(--train "$CORPORA/brown")
        [ -d "$CORPORA/europarl-fr-en" ] && nmt_data+=(--train "$CORPORA/europarl-fr-en/train" --dev \
            "$CORPORA/europarl-fr-en/dev" --train-limit 20000)
        if command -v nvidia-smi > /dev/null; then
            nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw --format=csv -lms 500 \
                > "$OUT/gpu-samples.csv" 2>&1 &
            SMI_PID=$!
        fi
    fi

    step tests 150 30 "$PYTHON" -m pytest -q -p no:cacheprovider -rs -o timeout=140 "${tests[@]}"
    step bench-nmt 170 40 "$PYTHON" bench/bench_gpu.py --device "$device" --tasks nmt "${bench_nmt[@]}" \
        "${bench_args[@]}" --json "$OUT/bench-nmt.json"
    step bench-pos 90 30 "$PYTHON" bench/bench_gpu.py --device "$device" --tasks pos "${bench_pos[@]}" \
        "${bench_args[@]}" --json "$OUT/bench-pos.json"
    step run-pos 80 30 "$PYTHON" run.py --task pos "${run_gpu[@]}" "${pos_data[@]}" --out "$runs/pos" --no-progress
    keep_run "$runs/pos"
    step run-nmt 100 40 "$PYTHON" run.py --task nmt "${run_gpu[@]}" "${nmt_data[@]}" --out "$runs/nmt" --no-progress
    keep_run "$runs/nmt"
    printf 'The jury said it did not .\nHe went home .\n' > "$runs/pos-input.txt"
    step tag 40 10 env CUDA_VISIBLE_DEVICES= "$PYTHON" run.py tag --checkpoint "$runs/pos" "$runs/pos-input.txt"
    if [ -f "$runs/nmt/dev.src" ]; then head -3 "$runs/nmt/dev.src"; else echo "la séance est ouverte ."; fi \
        > "$runs/nmt-input.txt"
    step translate 60 10 env CUDA_VISIBLE_DEVICES= "$PYTHON" run.py translate --checkpoint "$runs/nmt" --beam 2 \
        "$runs/nmt-input.txt"
    if [ "$CPU_MODE" != 1 ]; then  # as the budget allows: the compiled engine step (CUDA graphs per length bucket)
        # against the plain loop, and the engine with Adam (run beside bench-nmt's SGD: Adam's cost per update)
        step bench-compiled 150 60 "$PYTHON" bench/bench_gpu.py --device "$device" --tasks nmt --updates 60 \
            --variants plain,engine-compiled --workers 1 --repeats 1 --json "$OUT/bench-compiled.json"
        step bench-adam 90 40 "$PYTHON" bench/bench_gpu.py --device "$device" --tasks nmt --updates 60 \
            --variants engine --workers 1 --optimizer adam --repeats 2 --json "$OUT/bench-adam.json"
    fi
    rm -rf "$runs"
    exit "$FAILED"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    main "$@"
fi
