#!/usr/bin/env bash
# Checking a GPU machine: what a user runs on GPU nodes, proved or broken on one GPU node
# (one without network access too), in phases each held within a deadline (GPU_CHECK_SECONDS).
#
#   product  a real `nmt run` of the smoke config on CUDA (Ray Train places the workers on
#            the GPU, bf16 autocast and DeepSpeed over NCCL, checkpoints, MLflow in SQLite, evaluation on
#            CUDA); `nmt translate --device cuda`; `nmt serve` with a GPU replica answering a
#            POST; then the tests marked gpu and a Transformer-Tiny step time
#   wu       configs/multi30k_en_de_wu2021.yaml on one GPU (8,192 tokens an update, as the
#            paper's 2 x 4,096), lowercased BLEU on test2016 against Wu et al.'s 41.0
#   engine   the train stage's step against the plain step (ATen ops, host syncs, time);
#            runs of a small model sharing the GPU (train.gpus_per_worker), 1 to 16 at once;
#            a snapshot against a checkpoint; train.compile against eager in the update
#   bench    training throughput and MFU against MarianMTModel (Transformer base and big,
#            bf16, 25,000 tokens a batch); decoding on CUDA against CTranslate2
#   all      the four in turn (default)
#
# Pack first, where pip reaches the registry (benchmarks/gpu/gpu_pack.py says what and why):
#   bash benchmarks/gpu_pack.sh
# then on the GPU machine, carrying the parts that benchmarks/gpu/gpu_pack.py's CALLS names:
#   bash benchmarks/gpu_check.sh --phase product
#
# --cpu-dry-run runs every phase on this CPU at tiny sizes, in a fresh virtual
# environment holding only the GPU image's packages (gpu_image_packages.txt) and the
# packed ones, so that the packing, the imports and this script cannot rot between GPU
# runs. Results land in $OUT if set, else /tmp/gpu_check; each phase
# leaves summary.md, steps.tsv and logs.tar.gz there, and the wu phase its run.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
phase=all
dry_run=0
while [ $# -gt 0 ]; do
    case $1 in
        --phase) phase=$2; shift 2 ;;
        --cpu-dry-run) dry_run=1; shift ;;
        *) echo "usage: gpu_check.sh [--phase product|wu|engine|bench|all] [--cpu-dry-run]" >&2; exit 2 ;;
    esac
done
export PYTHONUNBUFFERED=1
work=${GPU_WORK:-/tmp/nmt-gpu-work}
rm -rf "$work/logs"  # this command's logs only
results=${OUT:-$([ "$dry_run" = 1 ] && echo "$work/results" || echo /tmp/gpu_check)}
mkdir -p "$results" "$work/logs"

if [ "$dry_run" = 1 ] && [ -z "${NMT_DRY_RUN_VENV:-}" ]; then
    # The image's packages in a fresh virtual environment (torch: the CPU wheel; linked
    # from this installation where its versions match: benchmarks/gpu/dry_run_venv.py), then
    # the packed parts for this Python, then this script again inside it.
    venv=$work/venv
    # Nothing from an earlier run: every stage runs, none is a cache hit.
    rm -rf "$work/artifacts" "$work/mlflow.db" "$work/wu" "$work/wu.started"
    version=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    echo "== CPU dry run: a virtual environment of the GPU image's packages (Python $version)"
    python3 benchmarks/gpu/dry_run_venv.py "$venv" 2>&1 | grep -v "^WARNING: Location"
    [ "${PIPESTATUS[0]}" = 0 ] || exit 1
    echo "== packing for Python $version (benchmarks/gpu/gpu_pack.py)"
    python3 benchmarks/gpu/gpu_pack.py --python-version "$version" --dest "$work/carry" --preset 0 \
        2>&1 | grep -v "^WARNING" || exit 1
    NMT_DRY_RUN_VENV=$venv GPU_CARRY=$work/carry PYTHON=$venv/bin/python exec bash "$0" --phase "$phase" --cpu-dry-run
fi

python=${PYTHON:-python3}
carry=${GPU_CARRY:-$repo/.gpu_carry}
site=${NMT_SITE:-/tmp/nmt-site}
device=cuda
if [ "$dry_run" = 1 ]; then
    device=cpu
fi

# The packed parts, unpacked once per archive (a warm machine keeps them between calls),
# then compiled to bytecode: the archives carry sources only, and where
# PYTHONDONTWRITEBYTECODE is set every process (each Ray worker, each actor of Ray Train)
# would compile Ray, DeepSpeed and MLflow again when it imports them: 11.4 s against
# 6.7 s for `import ray.train.torch, deepspeed, mlflow` on a 2-core CPU.
mkdir -p "$site"
unpacked=0
for part in base ray ctranslate2; do
    archive=$carry/$part/site.tar.xz
    [ -f "$archive" ] || continue
    stamp=$(stat -c %s-%Y "$archive")
    if [ "$(cat "$site/.$part" 2>/dev/null)" != "$stamp" ]; then
        tar -xJf "$archive" -C "$site" || { echo "could not unpack $archive"; exit 1; }
        echo "$stamp" > "$site/.$part"
        unpacked=1
    fi
done
if [ "$unpacked" = 1 ]; then
    "$python" -m compileall -q -j 0 "$site" > /dev/null || echo "warning: compileall failed in $site"
fi
# This repository's modules too (seconds; what is up to date is skipped).
"$python" -m compileall -q -j 0 "$repo/pipeline" "$repo/stages" "$repo/benchmarks" > /dev/null || true
export PYTHONPATH=$site:$repo${PYTHONPATH:+:$PYTHONPATH}
export NMT_MIRROR=$carry/data/corpora/multi30k
export NMT_CORPORA=$carry/data/corpora
export MLFLOW_TRACKING_URI=sqlite:///$work/mlflow.db
export NMT_ARTIFACT_ROOT=$work/artifacts
export RAY_USAGE_STATS_ENABLED=0
# `nmt` as a command that `timeout` can run: this Python's, whatever is on the PATH.
nmt=("$python" -m pipeline)

# One step: its output in $work/logs/NAME.log, its status and seconds in steps.tsv, the
# logs so far in logs.tar.gz (a command stopped at its limit still returns them). No
# step runs past the command's deadline: GPU_CHECK_SECONDS from the start (default an
# hour a phase, three hours for all; set it under a batch job's time limit).
deadline=${GPU_CHECK_SECONDS:-$([ "$phase" = all ] && echo 10800 || echo 3600)}
steps=$results/steps.tsv
printf 'phase\tstep\tstatus\tseconds\n' > "$steps"
step() {
    local name=$1 limit=$2; shift 2
    local begin=$SECONDS status left=$((deadline - SECONDS - 15))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -le 5 ]; then
        echo "== $phase_now/$name: no time left before the deadline"
        printf '%s\t%s\t%s\t%s\n' "$phase_now" "$name" 124 0 >> "$steps"
        return 124
    fi
    echo; echo "== $phase_now/$name (at most ${limit} s)"
    timeout --kill-after=10 "$limit" "$@" > "$work/logs/$name.log" 2>&1
    status=$?
    tail -n 25 "$work/logs/$name.log"
    printf '%s\t%s\t%s\t%s\n' "$phase_now" "$name" "$status" "$((SECONDS - begin))" >> "$steps"
    tar -czf "$results/logs.tar.gz" -C "$work" logs
    return $status
}
# The newest artifact of a stage, made after the file $2 if given (so that a failed wu
# run never hands on the product phase's model of the same name).
newest() {
    local found
    found=$(ls -td "$work"/artifacts/$1/*/ 2>/dev/null | head -1)
    [ -n "$found" ] && { [ -z "${2:-}" ] || [ "$found" -nt "$2" ]; } && echo "$found"
}

environment() {
    phase_now=environment
    {
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
        "$python" - <<'PY'
import importlib, platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
for name in ("ray", "deepspeed", "mlflow", "pydantic", "transformers", "ctranslate2"):
    try:
        print(f"{name} {importlib.import_module(name).__version__}")
    except Exception as error:  # noqa: BLE001 - what is missing is the news here
        print(f"{name}: {type(error).__name__}: {error}")
import ray.train.torch  # noqa: F401 - the slimmed Ray has what Ray Train needs
print("ray.train.torch imports")
PY
        ldconfig -p 2>/dev/null | grep -E "libcublas\.so\.|libcudart\.so\." | sed 's/^/  /'
    } 2>&1 | tee "$results/environment.txt"
}

product() {
    phase_now=product
    local config=configs/smoke.yaml model
    local settings=(--set train.use_gpu=true --set train.precision=bf16 --set evaluate.device=cuda)
    if [ "$dry_run" = 1 ]; then
        settings=(--set 'models=[{name: transformer_tiny, family: transformer, preset: tiny}]'
                  --set train.max_steps=20 --set train.warmup_steps=10 --set train.valid_every=10
                  --set train.checkpoint_every=10 --set download.train.max_pairs=600)
    fi
    step product_run 420 "${nmt[@]}" run "$config" "${settings[@]}"
    model=$(newest train/transformer_tiny)
    if [ -z "$model" ]; then
        echo "no trained transformer_tiny: translate, serve and MLflow checks skipped"
    else
        product_model "$model"
    fi
    # The narrower checks after the user's path, so that a short job proves that path first.
    if [ "$dry_run" = 0 ]; then
        step gpu_tests 240 "$python" -m pytest -q -m gpu tests/gpu -p no:cacheprovider
        # The wu phase's model shape is near Transformer-Tiny: eager against compiled.
        step tiny_throughput 120 "$python" benchmarks/training/train_throughput.py --device cuda --shapes tiny --tokens 8192 \
            --compile --steps 20 --rounds 2
    fi
    [ -n "$model" ]
}

# What the product phase checks with the model it trained.
product_model() {
    local model=$1
    printf 'A dog runs on the beach.\nTwo men are playing soccer in a park.\n' > "$work/sentences.en"
    # One output line per input line, or the step fails.
    step product_translate 120 bash -c '"${@:2}" > "$1" && cat "$1" && [ "$(wc -l < "$1")" -eq 2 ]' _ \
        "$work/translations.de" "${nmt[@]}" translate "$model" --input "$work/sentences.en" --device "$device"
    step product_serve 300 "$python" benchmarks/serving/serve_probe.py "$model" \
        --gpus-per-replica "$([ "$dry_run" = 1 ] && echo 0 || echo 1)"
    step product_mlflow 60 "$python" - <<'PY'
import os
from mlflow.tracking import MlflowClient
client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=1000)
train = [r for r in runs if r.data.tags.get("mlflow.runName", "").startswith("train/")]
print(f"{len(runs)} MLflow runs, {len(train)} of them train stages")
for run in train:
    print(run.data.tags.get("mlflow.runName"), run.info.status,
          {k: round(v, 3) for k, v in run.data.metrics.items() if k in ("train_loss", "mfu", "tokens_per_second")})
assert train and all(r.info.status == "FINISHED" for r in train)
PY
}

wu() {
    phase_now=wu
    local config=configs/multi30k_en_de_wu2021.yaml
    # One GPU: one worker of 8,192 tokens is the paper's update of 2 x 4,096. Training
    # stops at a wall time that leaves the evaluation 300 s before the deadline
    # (GPU_CHECK_SECONDS), so the phase always ends with a score; WU_WALL_TIME sets it.
    local training_time=$((deadline - SECONDS - 300))
    [ "$training_time" -lt 60 ] && training_time=60
    local settings=(--set train.workers=1 --set train.max_tokens=8192 --set train.compile="${WU_COMPILE:-false}"
                    --set train.max_wall_time="${WU_WALL_TIME:-$training_time}")
    # WU_SETTINGS: more `--set KEY=VALUE` words. A run that the deadline kills resumes
    # from its last checkpoint (every 200 updates) when the same command runs again on
    # the same machine, so a recipe longer than one job finishes in two.
    read -r -a extra <<< "${WU_SETTINGS:-}"
    settings+=("${extra[@]}")
    if [ "$dry_run" = 1 ]; then
        settings=(--set train.workers=1 --set train.use_gpu=false --set train.max_tokens=1024 --set train.max_steps=20
                  --set train.warmup_steps=10 --set train.valid_every=10 --set train.valid_bleu_every=10
                  --set train.train_bleu_sentences=20 --set train.valid_bleu_sentences=20 --set train.checkpoint_every=10
                  --set train.keep_checkpoints=2 --set train.average_last=2 --set evaluate.device=cpu
                  --set download.train.max_pairs=600 --set download.test.max_pairs=40 --set bpe.vocab_size=1000)
    fi
    touch "$work/wu.started"
    step wu_run "$deadline" "${nmt[@]}" run "$config" "${settings[@]}"
    local trained evaluated
    trained=$(newest train/transformer_tiny "$work/wu.started")
    evaluated=$(newest evaluate/transformer_tiny "$work/wu.started")
    mkdir -p "$work/wu"
    [ -n "$trained" ] && cp "$trained"/metrics.jsonl "$trained"/train_report.json "$work/wu/" 2>/dev/null
    [ -n "$evaluated" ] && cp "$evaluated"/scores.json "$evaluated"/hypotheses*.txt "$evaluated"/reference.txt "$work/wu/" 2>/dev/null
    tar -czf "$results/wu_run.tar.gz" -C "$work" wu
    # The trained model, for the bench phase's decode table on a fresh machine.
    [ -n "$trained" ] && tar -cf "$results/wu_model.tar" -C "$trained" model.pt vocab.json $(cd "$trained" && ls *.model)
}

engine() {
    phase_now=engine
    if [ "$dry_run" = 1 ]; then
        step step_overhead 120 "$python" benchmarks/training/step_overhead.py --device cpu --shapes tiny --steps 1 --rounds 1 \
            --json "$results/step_overhead.json"
        step gpu_sharing 120 "$python" benchmarks/training/gpu_sharing.py --device cpu --runs 1 2 --seconds 2 \
            --json "$results/gpu_sharing.json"
        step checkpoint_cost 120 "$python" benchmarks/training/checkpoint_cost.py --device cpu --shapes tiny --rounds 1 \
            --json "$results/checkpoint_cost.json"
        step compile_cost 240 "$python" benchmarks/training/compile_cost.py --device cpu --families transformer --updates 4 --backend eager \
            --json "$results/compile_cost.json"
    else
        # The train stage's engine against the plain step: tiny, Wu's, base and big.
        step step_overhead 240 "$python" benchmarks/training/step_overhead.py --device cuda --json "$results/step_overhead.json"
        # Runs of the frontier's small sizes sharing the GPU (train.gpus_per_worker): 1 to 16.
        step gpu_sharing 300 "$python" benchmarks/training/gpu_sharing.py --seconds 15 --json "$results/gpu_sharing.json"
        # A resumable checkpoint against a weights-only snapshot (train.resume_every).
        step checkpoint_cost 180 "$python" benchmarks/training/checkpoint_cost.py --device cuda \
            --json "$results/checkpoint_cost.json"
        # train.compile in the update, eager against compiled: where it wins, after how many updates.
        step compile_cost 420 "$python" benchmarks/training/compile_cost.py --device cuda --updates 80 \
            --json "$results/compile_cost.json"
    fi
}

bench() {
    phase_now=bench
    # The model to decode: one packed by gpu_pack.py, the wu phase's brought back as
    # wu_model.tar, or (on a machine still warm from the wu phase) the newest trained one.
    local model=$carry/data/model
    if [ -f "$carry/data/wu_model.tar" ]; then
        model=$work/wu_model
        mkdir -p "$model" && tar -xf "$carry/data/wu_model.tar" -C "$model"
    fi
    [ -f "$model/model.pt" ] || model=$(newest train/transformer_tiny)
    if [ "$dry_run" = 1 ]; then
        step throughput 300 "$python" benchmarks/training/train_throughput.py --device cpu --shapes tiny --tokens 512 \
            --steps 1 --rounds 1 --json "$results/train_throughput.json"
    else
        # Runs of the frontier's small sizes sharing the GPU (train.gpus_per_worker): 1 to 16.
        step gpu_sharing 240 "$python" benchmarks/training/gpu_sharing.py --seconds 15 --json "$results/gpu_sharing.json"
        # The train stage's engine against the plain step: tiny, Wu's, base and big.
        step step_overhead 240 "$python" benchmarks/training/step_overhead.py --device cuda --json "$results/step_overhead.json"
        step throughput 330 "$python" benchmarks/training/train_throughput.py --device cuda --shapes base big --tokens 25000 \
            --compile --json "$results/train_throughput.json"
    fi
    if [ -z "$model" ] || [ ! -f "$model/model.pt" ]; then
        echo "no trained model (the wu phase's, or one packed by gpu_pack.py): decode table skipped"
        return 0
    fi
    local sentences=1000 batch_sizes=(64 256)
    # The dry run proves each engine decodes; one batch size does (each engine is a
    # fresh process: 25 s a batch size on 2 cores).
    [ "$dry_run" = 1 ] && sentences=16 batch_sizes=(64)
    local test=$carry/data/corpora/multi30k
    "$python" -c "import gzip,sys; open(sys.argv[2],'w').write(gzip.open(sys.argv[1],'rt').read())" \
        "$test/test_2016_flickr.en.gz" "$work/test.en"
    "$python" -c "import gzip,sys; open(sys.argv[2],'w').write(gzip.open(sys.argv[1],'rt').read())" \
        "$test/test_2016_flickr.de.gz" "$work/test.de"
    step decode 240 "$python" benchmarks/serving/decode_speed.py "$model" --sources "$work/test.en" \
        --references "$work/test.de" --device "$device" --batch-sizes "${batch_sizes[@]}" --sentences "$sentences"
    cp "$work/logs/decode.log" "$results/decode_speed.txt"
}

begin=$SECONDS
environment
case $phase in
    product) product ;;
    wu) wu ;;
    engine) engine ;;
    bench) bench ;;
    all) product; wu; engine; bench ;;
    *) echo "unknown phase $phase" >&2; exit 2 ;;
esac
echo; echo "== summary ($((SECONDS - begin)) s)"
tar -czf "$results/logs.tar.gz" -C "$work" logs
"$python" benchmarks/gpu/gpu_summary.py "$results" | tee "$results/summary.md"
# Exit 1 when a step failed, so that CI's dry run fails with it.
failed=$(awk -F'\t' 'NR > 1 && $3 != 0 {print $2}' "$steps")
if [ -n "$failed" ]; then
    echo "failed steps: $(echo $failed)"
    exit 1
fi
