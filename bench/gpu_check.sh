#!/usr/bin/env bash
# bench/gpu_check.sh - the project's checks on one GPU machine (16 cores, no internet), ordered for a first run on a
# short budget: what a GPU run must prove comes first, and every stage publishes its results as it goes, so a check
# cut short (by its budget, or by whoever runs it) still returns what it measured. The stages, in order:
#   a  step-check  alone, first: bench/gpu_step_check.py on the real NMT and POS models (captured against eager
#                  gradients, a dropout pair with fresh masks per replay, a forced failing capture under graphs auto
#                  in process with the memory it leaves reserved, and in a child process started first, each of which
#                  must end in the eager step); its verdict streams into step-check.log
#   b  one-worker  timed, alone: one graphed engine worker against the graphed plain loop, fp32 (TF32 off on both),
#                  both tasks, 750 updates a run (a steady window of 600); each run's captures come before its window
#                  (on the CPU: bench_gpu's own --quick run, every CPU variant, 1 and 2 workers)
#   c  tests       the CUDA tests, `pytest -m cuda -v -rfEs` (each name and outcome streams as it finishes, so a cut
#                  run still names them), a per-test timeout; less the ones stage d runs
#   d  more        timed, alone: 2 and 4 workers against the graphed plain loop, then bf16 (the graphed bf16 loop
#                  against one bf16 worker); then side by side: run.py --gpus 1 end to end for POS then `run.py tag`,
#                  for NMT then `run.py translate` (both in CPU-only processes; --time-limit 20 counts training, after
#                  the worker's captures), and the compiled-worker CUDA test;
#                  last, alone, gpu_step_check's step timings (eager, padded, graphed; fp32 and bf16)
# Before them, stage 0 (setup): env (versions, the head of summary.txt), wheels, modules.
#
# Run from the repository root:
#   OUT=/tmp/gc HOGWILD_CORPORA=$PWD/.dev/corpora HOGWILD_WHEELS=$PWD/.dev/whl bash bench/gpu_check.sh
#   HOGWILD_GPU_CHECK_CPU=1 bash bench/gpu_check.sh    # every stage on the CPU, in the same order, tiny sizes
# It writes under $OUT, flat, at most 8 files (what the device tool brings back):
#   - summary.txt: the environment, then every stage (done, failed, cut (a step skipped for time), running or not
#     reached) and under it every step (ok, failed (rc N), timed out (limit Ns), skipped (why), running) with its
#     seconds, the failed tests by name, then the total; rewritten whenever a step starts or ends;
#   - step-check.log, one-worker.log, tests.log, more.log: each stage's output (a step run alone streams into it;
#     one run side by side is appended when it ends);
#   - one-worker.json: bench_gpu's runs of stage b, rewritten after each run;
#   - extras.tgz: stage d's bench JSON files, the junit files, the runs' small files (runs/<task>/), repacked when a
#     stage ends;
#   - gpu-samples.csv: nvidia-smi every 0.5 s (GPU mode).
# The exit status is 0 when every step was ok, else 1 (2: not run from the repository root; 3: no GPU).
#
# Each step runs under `timeout`, whose limit is the smaller of its own limit and what is left of BUDGET_S. A step
# whose minimum no longer fits is skipped and says so, so the whole check ends within BUDGET_S. A step cut by its
# limit is reported as timed out, and the next steps still run. The limits and needs: docs/benchmarks.md.
#
# Everything it needs, named here:
PYTHON=${PYTHON:-python3}                  # the python holding torch with CUDA (the GPU image's python3)
WHEELS=${HOGWILD_WHEELS:-}                 # a folder of wheels, installed offline (--no-deps) when given: the
WHEELS_NEEDED=(sacremoses conllu)          # modules run.py needs that the GPU image lacks (sacremoses' own needs,
#                                            click, joblib, regex and tqdm, are on it). Fetch them where pip works:
#                                            pip download --no-deps -d WHEELS sacremoses conllu  (pure-Python wheels)
CORPORA=${HOGWILD_CORPORA:-$(dirname "$PWD")/shared/corpora}  # brown/ and europarl-fr-en/; without: synthetic runs
OUT=${OUT:-/tmp/gpu-check}
BUDGET_S=${BUDGET_S:-600}                  # the whole check, seconds (10 minutes)
CPU_MODE=${HOGWILD_GPU_CHECK_CPU:-0}       # 1: every stage on the CPU with tiny sizes
GRACE=5                                    # a step past its limit gets SIGTERM, then SIGKILL this much later
COMPILED_TEST=reduce_overhead              # -k of the compiled-worker CUDA test, run in stage d
STAGES=(0 a b c d)
declare -A STAGE_NAME=([0]=setup [a]=step-check [b]=one-worker [c]=tests [d]=more)
set -u -o pipefail

START_S=$SECONDS
WORK=""        # a scratch folder: the step records, logs of steps run side by side, the extras
SIDE_BY_SIDE=0 # 1 inside side_by_side's chains: a step's log goes to $WORK first, then into its stage's log

stage_log() { echo "$OUT/${STAGE_NAME[${1/0/a}]}.log"; }  # the setup's output heads step-check.log

# record STAGE NAME STATUS SECONDS: one line per event; the last line of a step is its state.
record() {
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$WORK/steps"
    render_summary
}

# render_summary: summary.txt from $WORK/env.txt and $WORK/steps (written aside, then moved: never half-written).
render_summary() {
    local tmp="$OUT/.summary.$BASHPID"
    {
        cat "$WORK/env.txt" 2> /dev/null
        local stage
        for stage in "${STAGES[@]}"; do
            awk -F'\t' -v stage="$stage" -v name="${STAGE_NAME[$stage]}" '
                $1 == stage { if (!($2 in state)) order[++n] = $2; state[$2] = $3; secs[$2] = $4 }
                END {
                    status = n ? "done" : "not reached"
                    for (i = 1; i <= n; i++) {
                        s = state[order[i]]
                        if (s ~ /^(failed|timed out)/) status = "failed"
                        else if (s == "running" && status != "failed") status = "running"
                        else if (s ~ /^skipped/ && status == "done") status = "cut (a step skipped for time)"
                    }
                    printf "stage %s %-12s %s\n", stage, name, status
                    for (i = 1; i <= n; i++) printf "    %-16s %s %ss\n", order[i], state[order[i]], secs[order[i]]
                }' "$WORK/steps"
            cat "$WORK"/failed-"$stage"-* 2>/dev/null
        done
        cat "$WORK/total" 2> /dev/null
    } > "$tmp"
    mv -f "$tmp" "$OUT/summary.txt"
}

# step STAGE NAME WANT MIN CMD...: run CMD under timeout min(WANT, seconds left), its output into the stage's log;
# skip it when fewer than MIN seconds are left.
step() {
    local stage=$1 name=$2 want=$3 min=$4 left limit began rc status log target offset
    shift 4
    left=$(( BUDGET_S - (SECONDS - START_S) - GRACE ))
    limit=$(( want < left ? want : left ))
    if (( limit < min )); then
        record "$stage" "$name" "skipped ($(( left > 0 ? left : 0 ))s left, needs ${min}s)" 0
        return 0
    fi
    target=$(stage_log "$stage")
    log=$target
    [ "$SIDE_BY_SIDE" = 1 ] && log="$WORK/$name.log"
    offset=$(( $(stat -c %s "$log" 2>/dev/null || echo 0) + 1 ))
    echo "=== $name (limit ${limit}s, $(( SECONDS - START_S ))s into the check): $*" | tee -a "$log"
    record "$stage" "$name" running 0
    began=$SECONDS
    timeout -k "$GRACE" "$limit" "$@" >> "$log" 2>&1 < /dev/null
    rc=$?
    case $rc in
        0) status=ok ;;
        124|137) status="timed out (limit ${limit}s)" ;;
        *) status="failed (rc $rc)" ;;
    esac
    echo "=== $name: $status after $(( SECONDS - began ))s" >> "$log"
    tail -c +"$offset" "$log" | tail -n 5 | sed "s/^/    $name| /"
    # the failed tests by name, from pytest -v's lines (there even if the run was cut)
    tail -c +"$offset" "$log" | grep -E '^[^ ]+::[^ ]+ (FAILED|ERROR)' | sed "s/^/    $name| /" \
        > "$WORK/failed-$stage-$name"
    if [ "$SIDE_BY_SIDE" = 1 ]; then
        until mkdir "$WORK/append.lock" 2> /dev/null; do sleep 0.1; done  # one chain appends at a time
        cat "$log" >> "$target"
        rmdir "$WORK/append.lock"
    fi
    record "$stage" "$name" "$status" "$(( SECONDS - began ))"
    return 0
}

# side_by_side CHAIN...: run each chain (a function calling `step`) in the background, then wait for all of them.
side_by_side() {
    local chain pids=()
    for chain in "$@"; do
        SIDE_BY_SIDE=1 "$chain" &
        pids+=($!)
    done
    wait "${pids[@]}"
}

# publish: extras.tgz from $WORK/extras (written aside, then moved).
publish() {
    tar czf "$OUT/.extras.tgz" -C "$WORK" extras && mv -f "$OUT/.extras.tgz" "$OUT/extras.tgz"
}

# failed_steps: 1 when a step's last state is anything but ok.
failed_steps() {
    if awk -F'\t' '{ state[$1 FS $2] = $3 } END { for (k in state) if (state[k] != "ok") bad = 1; exit !bad }' \
        "$WORK/steps"; then echo 1; else echo 0; fi
}

finish() {
    [ -n "${SMI_PID:-}" ] && kill "$SMI_PID" 2> /dev/null
    [ -n "$WORK" ] || return 0
    printf 'total %ss of a %ss budget\n' "$(( SECONDS - START_S ))" "$BUDGET_S" > "$WORK/total"
    render_summary
    publish
    cat "$OUT/summary.txt"
    rm -rf "$WORK"
}

# Copies a run's small files (no checkpoints) into the extras.
keep_run() {
    local run=$1 name
    name=$(basename "$run")
    mkdir -p "$WORK/extras/runs/$name"
    for f in summary.json config.json metrics.jsonl dev.hyp; do
        [ -f "$run/$f" ] && cp "$run/$f" "$WORK/extras/runs/$name/"
    done
    return 0
}

# Stage d's chains, run side by side (their settings come from main).
check_pos() {
    step d run-pos 110 30 "$PYTHON" run.py --task pos "${RUN_GPU[@]}" "${POS_DATA[@]}" --out "$WORK/pos" \
        --no-progress
    keep_run "$WORK/pos"
    printf 'The jury said it did not .\nHe went home .\n' > "$WORK/pos-input.txt"
    step d tag 40 10 env CUDA_VISIBLE_DEVICES= "$PYTHON" run.py tag --checkpoint "$WORK/pos" "$WORK/pos-input.txt"
}
check_nmt() {
    step d run-nmt 150 40 "$PYTHON" run.py --task nmt "${RUN_GPU[@]}" "${NMT_DATA[@]}" --out "$WORK/nmt" \
        --no-progress
    keep_run "$WORK/nmt"
    if [ -f "$WORK/nmt/dev.src" ]; then head -3 "$WORK/nmt/dev.src"; else echo "la séance est ouverte ."; fi \
        > "$WORK/nmt-input.txt"
    step d translate 60 10 env CUDA_VISIBLE_DEVICES= "$PYTHON" run.py translate --checkpoint "$WORK/nmt" --beam 2 \
        "$WORK/nmt-input.txt"
}
check_compiled() {
    step d tests-compiled 150 40 "$PYTHON" -m pytest -v -rfEs --tb=short -p no:cacheprovider -o timeout=140 \
        --junitxml="$WORK/extras/tests-compiled.xml" -k "$COMPILED_TEST" "${COMPILED_TESTS[@]}"
}

# begin: $OUT emptied of an earlier check's files, the scratch folder, the summary (every stage not reached).
begin() {
    mkdir -p "$OUT"
    rm -f "$OUT/summary.txt" "$OUT/extras.tgz" "$OUT/one-worker.json" "$OUT"/*.log
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
    mkdir -p "$WORK/extras"
    : > "$WORK/steps"
    trap finish EXIT
    render_summary
}

main() {
    if [ ! -f run.py ] || [ ! -f bench/bench_gpu.py ]; then
        echo "gpu_check: run me from the hogwild repository root (run.py, bench/bench_gpu.py)" >&2
        exit 2
    fi
    begin
    export PYTHONUNBUFFERED=1 HOGWILD_CORPORA=$CORPORA HOGWILD_TRACEBACK=1
    export HOGWILD_CACHE=${HOGWILD_CACHE:-/tmp/hogwild-cache}   # tokenized corpora: the runs share it

    local device bench step_check one more_k more_bf16 tests
    if [ "$CPU_MODE" = 1 ]; then
        device=cpu
        step_check=(--device cpu --quick)
        # the batches' lengths from a gamma fit, not from the corpora (tokenizing Europarl takes longer than the runs)
        quick=(env "HOGWILD_CORPORA=$WORK/no-corpora" "$PYTHON" -m bench.bench_gpu --device cpu --quick)
        # stage b: the bench's own quick CPU run, graphs auto (eager engine rows): tests/bench/test_gpu_check.py checks
        # its rows from this stage, not from a run of its own; stage d's engine rows run the graphed step's code on
        # 'cpu-replica' without capture (graphs on)
        one=("${quick[@]}" --tasks pos,nmt --variants plain,plain-graphed,engine --worker-counts 1,2)
        bench=("${quick[@]}" --engine-option graphs=on --engine-option graph_limit=4)  # 20 updates use no shape 4 times
        more_k=(--tasks pos --updates 20 --worker-counts 2 --variants engine)
        more_bf16=(--tasks pos --updates 20)
        # the CUDA tests are skipped without CUDA: the stages themselves are what is tested here
        tests=(-m cuda tests/hogwild/test_gpu.py) COMPILED_TESTS=(-m cuda tests/hogwild/worker/test_compile_tf32.py)
        RUN_GPU=(--workers 1 --cpu-workers replica)   # the GPU workers' code path ('cpu-replica')
        POS_DATA=(--steps 8 --synthetic-size 100 --eval-every 100000)
        NMT_DATA=(--steps 4 --synthetic-size 100 --batch-size 8 --dev-limit 4 --eval-every 100000 --beam 2)
    else
        device=cuda:0
        step_check=(--device cuda:0)
        bench=("$PYTHON" -m bench.bench_gpu --device cuda:0)
        one=("${bench[@]}" --tasks pos,nmt --updates 750 --variants plain-graphed,engine --worker-counts 1)
        more_k=(--tasks pos,nmt --updates 750 --worker-counts 2,4 --variants plain-graphed,engine)
        more_bf16=(--tasks pos,nmt --updates 750)
        # The tests that need CUDA (marked `cuda` by tests/conftest.py from their skip reason), less three that
        # stage d runs: the compiled worker (tests-compiled), test_bench_gpu.py's GPU case (the bench steps) and
        # run.py --gpus 1 end to end with tag/translate on a CPU-only process (run-pos, tag, run-nmt, translate).
        tests=(-m cuda -k "not $COMPILED_TEST"
               --deselect tests/bench/test_bench_gpu.py::test_quick_run_on_a_gpu_with_every_variant
               --deselect tests/hogwild/test_gpu.py::test_run_py_gpus_1_end_to_end_then_tag_or_translate_on_a_cpu_only_process
               tests)
        COMPILED_TESTS=(-m cuda tests/hogwild)
        RUN_GPU=(--gpus 1)
        POS_DATA=(--preset paper --time-limit 20 --dev-limit 200 --eval-every 100000)
        NMT_DATA=(--preset paper --time-limit 20 --dev-limit 100 --eval-every 100000 --beam 2)
        [ -d "$CORPORA/brown" ] && POS_DATA+=(--train "$CORPORA/brown")
        [ -d "$CORPORA/europarl-fr-en" ] && NMT_DATA+=(--train "$CORPORA/europarl-fr-en/train" --dev \
            "$CORPORA/europarl-fr-en/dev" --train-limit 20000)
        if command -v nvidia-smi > /dev/null; then
            nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw --format=csv -lms 500 \
                > "$OUT/gpu-samples.csv" 2>&1 &
            SMI_PID=$!
        fi
    fi

    # 0: the environment (the head of summary.txt), the wheels, the modules.
    {
        echo "gpu_check $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git rev-parse --short HEAD 2> /dev/null)," \
             "$(nproc) cores, $(free -g | awk '/^Mem/ {print $2}') GiB, budget ${BUDGET_S}s, mode $device"
        command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
        timeout 60 "$PYTHON" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
            "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "devices", torch.cuda.device_count())'
        ls "$CORPORA" > /dev/null 2>&1 && echo "corpora: $CORPORA" || echo "no corpora at $CORPORA: synthetic runs"
    } > "$WORK/env.txt" 2>&1
    render_summary
    if [ "$CPU_MODE" != 1 ] && ! "$PYTHON" -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
        echo "gpu_check: $PYTHON's torch sees no GPU (HOGWILD_GPU_CHECK_CPU=1 runs the stages on the CPU)" \
            | tee -a "$WORK/env.txt"
        exit 3
    fi
    if [ -n "$WHEELS" ]; then
        step 0 wheels 60 10 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target /tmp/hogwild-site \
            "$WHEELS"/*.whl
        export PYTHONPATH=/tmp/hogwild-site${PYTHONPATH:+:$PYTHONPATH}
    fi
    step 0 modules 30 5 "$PYTHON" -c "import importlib; [importlib.import_module(m) for m in '${WHEELS_NEEDED[*]}'.split()]"

    # a: does the graphed step hold on a GPU at all (alone, first; its step timings come last, in d).
    step a step-check 90 30 "$PYTHON" -m bench.gpu_step_check "${step_check[@]}" --timed-steps 0
    publish
    # b: one graphed worker against the graphed plain loop, fp32 (timed, alone).
    step b one-worker 220 60 "${one[@]}" --repeats 1 --json "$OUT/one-worker.json"
    publish
    # c: the CUDA tests.
    step c tests 170 30 "$PYTHON" -m pytest -v -rfEs --tb=short -p no:cacheprovider -o timeout=90 \
        --junitxml="$WORK/extras/tests.xml" "${tests[@]}"
    publish
    # d: K workers and bf16 (timed, alone), then the untimed runs side by side.
    step d workers 130 60 "${bench[@]}" "${more_k[@]}" --repeats 1 --repeats-shared 1 \
        --json "$WORK/extras/more-workers.json"
    step d bf16 100 45 "${bench[@]}" "${more_bf16[@]}" \
        --variants plain-graphed-bf16,engine-bf16 --worker-counts 1 --repeats 1 --json "$WORK/extras/more-bf16.json"
    side_by_side check_pos check_nmt check_compiled
    step d step-costs 60 30 "$PYTHON" -m bench.gpu_step_check "${step_check[@]}" --timing-only
    publish
    exit "$(failed_steps)"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    main "$@"
fi
