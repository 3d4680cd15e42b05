#!/usr/bin/env bash
# bench/gpu_check.sh - the project's checks on one GPU machine (16 cores, no internet), inside a time budget it
# enforces. First the timed benches run alone: bench_gpu for NMT, then for POS (the plain loop eager and graphed per
# length bucket, fp32/TF32 and bf16, against the engine with 1, 2 and 4 workers on the padded loss, which a graphed
# worker step needs). Then the untimed checks run side by side, none of them a timing:
#   - the CUDA tests, each test's name and outcome printed as it finishes, and a junit file;
#   - the compiled-worker CUDA test in its own process;
#   - run.py --gpus 1 end to end for POS, then `run.py tag` on its checkpoint in a CPU-only process
#     (CUDA_VISIBLE_DEVICES=);
#   - the same for NMT, then `run.py translate`;
#   - bench/gpu_step_check.py (the graphed engine step against the eager one).
# Last, as the budget allows and alone again, one engine worker under bf16 autocast against the graphed bf16 loop.
#
# Run from the repository root:
#   OUT=/tmp/gc HOGWILD_CORPORA=$PWD/.dev/corpora HOGWILD_WHEELS=$PWD/.dev/whl bash bench/gpu_check.sh
#   HOGWILD_GPU_CHECK_CPU=1 bash bench/gpu_check.sh    # every step on the CPU, tiny sizes: tests this script
# It writes under $OUT:
#   - <step>.log for every step;
#   - bench-{nmt,pos,bf16}.json, every measurement, rewritten after each run;
#   - tests.xml and tests-compiled.xml (junit);
#   - runs/<task>/ (summary.json, config.json, metrics.jsonl; the checkpoints stay in a temporary folder);
#   - gpu-samples.csv (nvidia-smi every 0.5 s, GPU mode);
#   - summary.txt: one line per step, `<step> <ok|failed (rc N)|timed out (limit Ns)|skipped (why)> <seconds>s`,
#     the failed tests' names under the test steps, then the total.
# With TARBALL=FILE it also packs $OUT into FILE and copies summary.txt beside it (the device tool brings back at
# most 8 files). The exit status is 0 when no step failed or timed out, else 1.
#
# Each step runs under `timeout`, whose limit is the smaller of its own limit and what is left of BUDGET_S. A step
# whose minimum no longer fits is skipped and says so, so the whole check ends within BUDGET_S. A step cut by its
# limit is reported as timed out, and the next steps still run. The limits are at least 1.3x what each step needed on
# an H100/H200 (docs/benchmarks.md).
#
# Everything it needs, named here:
PYTHON=${PYTHON:-python3}                  # the python holding torch with CUDA (the GPU image's python3)
WHEELS=${HOGWILD_WHEELS:-}                 # a folder of wheels, installed offline (--no-deps) when given: the
WHEELS_NEEDED=(sacremoses conllu)          # modules run.py needs that the GPU image lacks (sacremoses' own needs,
#                                            click, joblib, regex and tqdm, are on it). Fetch them where pip works:
#                                            pip download --no-deps -d WHEELS sacremoses conllu  (pure-Python wheels)
CORPORA=${HOGWILD_CORPORA:-$(dirname "$PWD")/shared/corpora}  # brown/ and europarl-fr-en/; without: synthetic runs
OUT=${OUT:-/tmp/gpu-check}
TARBALL=${TARBALL:-}                       # optional: pack $OUT into this file at the end
BUDGET_S=${BUDGET_S:-540}                  # the whole check, seconds (9 minutes)
CPU_MODE=${HOGWILD_GPU_CHECK_CPU:-0}       # 1: every step on the CPU with tiny sizes
GRACE=5                                    # a step past its limit gets SIGTERM, then SIGKILL this much later
COMPILED_TEST=reduce_overhead              # -k of the compiled-worker CUDA test, run in its own process
set -u -o pipefail

START_S=$SECONDS
FAILED=0

# step NAME WANT MIN CMD...: run CMD (output to $OUT/NAME.log) under timeout min(WANT, seconds left); skip it when
# fewer than MIN seconds are left. One summary line per step.
step() {
    local name=$1 want=$2 min=$3 left limit began rc status
    shift 3
    left=$(( BUDGET_S - (SECONDS - START_S) - GRACE ))
    limit=$(( want < left ? want : left ))
    if (( limit < min )); then
        printf '%-16s skipped (%ss left, needs %ss) 0s\n' "$name" "$(( left > 0 ? left : 0 ))" "$min" \
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
    tail -n 4 "$OUT/$name.log" | sed "s/^/    $name| /"
    printf '%-16s %s %ss\n' "$name" "$status" "$(( SECONDS - began ))" | tee -a "$OUT/summary.txt"
    if [[ $name == tests* ]]; then  # the failed tests by name, from pytest -v's lines (there even if it was cut)
        grep -E '^[^ ]+::[^ ]+ (FAILED|ERROR)' "$OUT/$name.log" | sed "s/^/    $name| /" | tee -a "$OUT/summary.txt"
    fi
    return 0
}

# side_by_side CHAIN...: run each chain (a function calling `step`) in the background, then wait for all of them.
side_by_side() {
    local chain pids=()
    for chain in "$@"; do
        "$chain" &
        pids+=($!)
    done
    wait "${pids[@]}"
}

# failed_steps: 1 when a step in summary.txt failed or timed out (steps run side by side set FAILED in a subshell).
failed_steps() {
    if grep -qE '^[a-z0-9-]+ +(failed|timed out)' "$OUT/summary.txt"; then echo 1; else echo 0; fi
}

finish() {
    [ -n "${SMI_PID:-}" ] && kill "$SMI_PID" 2>/dev/null
    printf 'total            %ss of a %ss budget\n' "$(( SECONDS - START_S ))" "$BUDGET_S" | tee -a "$OUT/summary.txt"
    if [ -n "$TARBALL" ]; then
        tar czf "$TARBALL" -C "$(dirname "$OUT")" "$(basename "$OUT")" && cp "$OUT/summary.txt" "$(dirname "$TARBALL")/"
    fi
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

# The untimed chains, run side by side (their settings come from main).
check_tests() {
    step tests 260 30 "$PYTHON" -m pytest -v -rfEs --tb=short -p no:cacheprovider -o timeout=120 \
        --junitxml="$OUT/tests.xml" -k "not $COMPILED_TEST" "${TESTS[@]}"
}
check_compiled() {
    step tests-compiled 150 30 "$PYTHON" -m pytest -v -rfEs --tb=short -p no:cacheprovider -o timeout=140 \
        --junitxml="$OUT/tests-compiled.xml" -k "$COMPILED_TEST" "${COMPILED_TESTS[@]}"
}
check_pos() {
    step run-pos 100 30 "$PYTHON" run.py --task pos "${RUN_GPU[@]}" "${POS_DATA[@]}" --out "$RUNS/pos" --no-progress
    keep_run "$RUNS/pos"
    printf 'The jury said it did not .\nHe went home .\n' > "$RUNS/pos-input.txt"
    step tag 40 10 env CUDA_VISIBLE_DEVICES= "$PYTHON" run.py tag --checkpoint "$RUNS/pos" "$RUNS/pos-input.txt"
}
check_nmt() {
    step run-nmt 120 40 "$PYTHON" run.py --task nmt "${RUN_GPU[@]}" "${NMT_DATA[@]}" --out "$RUNS/nmt" --no-progress
    keep_run "$RUNS/nmt"
    if [ -f "$RUNS/nmt/dev.src" ]; then head -3 "$RUNS/nmt/dev.src"; else echo "la séance est ouverte ."; fi \
        > "$RUNS/nmt-input.txt"
    step translate 60 10 env CUDA_VISIBLE_DEVICES= "$PYTHON" run.py translate --checkpoint "$RUNS/nmt" --beam 2 \
        "$RUNS/nmt-input.txt"
}
check_step_graphs() {  # bench/gpu_step_check.py; a missing module is a failed step like any other
    step gpu-step-check 150 30 "$PYTHON" -m bench.gpu_step_check "${STEP_CHECK[@]}"
}

main() {
    if [ ! -f run.py ] || [ ! -f bench/bench_gpu.py ]; then
        echo "gpu_check: run me from the hogwild repository root (run.py, bench/bench_gpu.py)" >&2
        exit 2
    fi
    mkdir -p "$OUT"
    : > "$OUT/summary.txt"
    RUNS=$(mktemp -d /tmp/gpu-check-runs.XXXXXX)
    export PYTHONUNBUFFERED=1 HOGWILD_CORPORA=$CORPORA HOGWILD_TRACEBACK=1
    export HOGWILD_CACHE=${HOGWILD_CACHE:-/tmp/hogwild-cache}   # tokenized corpora: the runs share it
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

    # The benches' flags on a GPU: repeats 2 for the plain loops and 1 worker, 1 for 2 and 4 workers; 120 NMT / 300
    # POS updates per run (bench-bf16: bench_gpu's defaults, the same). On the CPU the same flags are parsed, and
    # cheap ones after them win (bench_gpu's own tests cover the rest).
    local device bench=(--worker-counts 1,2,4 --repeats 2 --repeats-shared 1)
    local bench_nmt=(--updates 120) bench_pos=(--updates 300)
    local bench_bf16=(--tasks nmt,pos --variants plain-graphed-bf16,engine-bf16 --worker-counts 1 --repeats 1)
    if [ "$CPU_MODE" = 1 ]; then
        # the CUDA tests are skipped without CUDA: the steps themselves are what is tested here
        TESTS=(-m cuda tests/hogwild/test_gpu.py) COMPILED_TESTS=(-m cuda tests/hogwild/worker)
        device=cpu
        bench+=(--quick --variants plain --repeats 1) bench_nmt+=(--updates 20) bench_pos+=(--updates 20)
        bench_bf16+=(--quick --tasks pos --variants plain-graphed-bf16)
        RUN_GPU=(--workers 1 --cpu-workers replica)   # the GPU workers' code path ('cpu-replica')
        POS_DATA=(--steps 20 --synthetic-size 200 --eval-every 100000)
        NMT_DATA=(--steps 6 --synthetic-size 200 --batch-size 8 --dev-limit 20 --eval-every 100000 --beam 2)
        STEP_CHECK=(--device cpu --quick)
    else
        if ! "$PYTHON" -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
            echo "gpu_check: $PYTHON's torch sees no GPU (HOGWILD_GPU_CHECK_CPU=1 runs the steps on the CPU)" \
                | tee -a "$OUT/summary.txt"
            exit 3
        fi
        # The tests that need CUDA (marked `cuda` by tests/conftest.py from their skip reason), less three that other
        # steps run: the compiled worker (tests-compiled), test_bench_gpu.py's GPU case (the bench steps) and
        # run.py --gpus 1 end to end with tag/translate on a CPU-only process (run-pos, tag, run-nmt, translate).
        TESTS=(-m cuda --deselect tests/bench/test_bench_gpu.py::test_quick_run_on_a_gpu_with_every_variant
               --deselect tests/hogwild/test_gpu.py::test_run_py_gpus_1_end_to_end_then_tag_or_translate_on_a_cpu_only_process
               tests)
        COMPILED_TESTS=(-m cuda tests/hogwild)
        device=cuda:0
        RUN_GPU=(--gpus 1)
        POS_DATA=(--preset paper --time-limit 20 --dev-limit 200 --eval-every 100000)
        NMT_DATA=(--preset paper --time-limit 20 --dev-limit 100 --eval-every 100000 --beam 2)
        [ -d "$CORPORA/brown" ] && POS_DATA+=(--train "$CORPORA/brown")
        [ -d "$CORPORA/europarl-fr-en" ] && NMT_DATA+=(--train "$CORPORA/europarl-fr-en/train" --dev \
            "$CORPORA/europarl-fr-en/dev" --train-limit 20000)
        STEP_CHECK=(--device cuda)
        if command -v nvidia-smi > /dev/null; then
            nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw --format=csv -lms 500 \
                > "$OUT/gpu-samples.csv" 2>&1 &
            SMI_PID=$!
        fi
    fi

    # Timed, each alone: nothing else runs on the machine meanwhile.
    step bench-nmt 170 60 "$PYTHON" -m bench.bench_gpu --device "$device" --tasks nmt "${bench[@]}" \
        "${bench_nmt[@]}" --json "$OUT/bench-nmt.json"
    step bench-pos 125 45 "$PYTHON" -m bench.bench_gpu --device "$device" --tasks pos "${bench[@]}" \
        "${bench_pos[@]}" --json "$OUT/bench-pos.json"
    # Untimed, side by side.
    side_by_side check_tests check_compiled check_pos check_nmt check_step_graphs
    # Timed, alone, as the budget allows.
    step bench-bf16 90 60 "$PYTHON" -m bench.bench_gpu --device "$device" "${bench_bf16[@]}" \
        --json "$OUT/bench-bf16.json"
    rm -rf "$RUNS"
    exit "$(failed_steps)"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    main "$@"
fi
