#!/usr/bin/env bash
# One call on the GPU machine: compile every kernel (parallel), then the steps named in FO_STEPS,
# each under its own time limit, logging everything to $OUT/run.log and writing CSV + provenance
# sidecars under $OUT/data/. Run from the repo root:
#   FO_GIT_SHA=<sha of HEAD> FO_STEPS=build,tests,sanitize,bench_gemm,bench_postops scripts/gpu_run.sh
# Steps: build sm90_tiles sm90_llm_free calibrate heldout explorer tests sanitize sanitize_sm90 bench_gemm exp_gemm signal_cost stall_sites bench_sm90 sm90_ncu sm90_sass sm90_ab tune_agree sm90_llm bench_postops launch profile record host_path
# timeline engine engine_host multi_gpu bench_overlap run_all_quick heatmap ablation e2e; arguments through FO_TEST_FILES (default tests/gpu), FO_TEST_LIMIT, FO_TEST_ARGS, FO_GEMM_ARGS, FO_EXP_OPTIONS/FO_EXP_ARGS, FO_STALL_ARGS, FO_SM90_ARGS, FO_POSTOPS_ARGS,
# FO_MULTI_ARGS, FO_OVERLAP_ARGS, FO_FIGURES_ARGS (default --quick). (tests runs every file in tests/gpu, the sm90 GEMM's included, unless FO_TEST_FILES names some.)
# (the GPU machine gets a copy without .git: FO_GIT_SHA is what the provenance sidecars record)
set -uo pipefail
OUT=${OUT:-/tmp/fo_out}
mkdir -p "$OUT/data"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" FO_CACHE_DIR=${FO_CACHE_DIR:-/tmp/fo_cache}
export NCCL_NVLS_ENABLE=0
steps=",${FO_STEPS:-build,tests,sanitize,bench_gemm,bench_postops},"
log="$OUT/run.log"
# The notebook wheels (../shared/gpu/fetch-wheels.sh fills .whl/; carry it): papermill, ipywidgets, nvtx.
if compgen -G ".whl/*.whl" >/dev/null; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fo_site \
      .whl/*.whl >>"$log" 2>&1; then
    export PYTHONPATH="$PYTHONPATH:/tmp/fo_site"
  else
    echo "gpu_run: the wheels in .whl/ did not install (see $log): tests that need them skip" | tee -a "$log"
  fi
fi
summary=()
step() {  # step NAME LIMIT_S CMD...
  local name=$1 limit=$2; shift 2
  [[ $steps == *",$name,"* ]] || return 0
  echo "=== $name (limit ${limit}s): $*" | tee -a "$log"
  local t0=$SECONDS
  timeout "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  summary+=("$(printf '%-14s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - t0))")")
  echo "=== $name rc=$rc in $((SECONDS - t0))s" | tee -a "$log"
}
python3 -m fo_lib info >>"$log" 2>&1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv >>"$log" 2>&1
step build 120 python3 -m fo_lib build
# Record the Hopper tile table (full-wave time per tile x raster x K) before anything that
# picks a config: the tests and benchmarks after it in this call read THAT table (FO_SM90_TILES; a
# config change makes the committed one stale, which the GPU autotune tests refuse), and sm90_llm
# benchmarks the LLM shapes with its picks. To make the table the GPU's default, commit
# $OUT/data/gemm_sm90_tiles.{csv,meta.json} as data/<gpu>/. ~50 s on an H200; its limit is kept
# short because a kernel that hangs (a new config's first run) would otherwise hold the whole call.
step sm90_tiles 150 python3 scripts/bench/record_sm90_tiles.py ${FO_SM90_TILES_ARGS:-} --out "$OUT/data/gemm_sm90_tiles.csv"
# (without sm90_tiles in the same call, and no FO_SM90_TILES: the table committed under data/<gpu>/)
[ -z "${FO_SM90_TILES:-}" ] && [ -f "$OUT/data/gemm_sm90_tiles.csv" ] && export FO_SM90_TILES="$OUT/data/gemm_sm90_tiles.csv"
tiles_arg=()
[ -n "${FO_SM90_TILES:-}" ] && tiles_arg=(--tiles "$FO_SM90_TILES")
# The plain path with no tile table at all (table-free autotuning), then the offline phase as a user
# runs it (its wall time is the bar's), into the kernel cache's folder: the steps after it read it.
step sm90_llm_free 240 python3 scripts/bench/bench_gemm_sm90_llm.py --tiles guess ${FO_SM90_LLM_ARGS:-} --out "$OUT/data/gemm_sm90_llm_table_free.csv"
step calibrate 400 bash -c "time python3 -m fo_lib calibrate ${FO_CALIBRATE_ARGS:-} && cp -r \"\$FO_CACHE_DIR/calibration\" \"$OUT/data/\""
step tests "${FO_TEST_LIMIT:-420}" python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 ${FO_TEST_FILES:-tests/gpu} ${FO_TEST_ARGS:-}
step sanitize 150 bash -c "compute-sanitizer --tool memcheck --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py && compute-sanitizer --tool racecheck --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py"
# cuda-bindings probes the driver with cuGetProcAddress calls that fail by design: not kernel errors.
step sanitize_sm90 300 bash -c "compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90 && compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 python3 scripts/profile/sanitize_kernels.py --sm90"
step bench_gemm 240 python3 scripts/bench/bench_gemm.py ${FO_GEMM_ARGS:-} --out "$OUT/data/gemm_portable.csv"
# Kernel experiments: the portable benchmark once per NVRTC option set in FO_EXP_OPTIONS (';'-separated,
# e.g. "-DFO_SIGNAL_RELEASE_KTILE=0;-DFO_SIGNAL_RELEASE_KTILE=2"), short (FO_EXP_ARGS), each its own CSV.
if [[ $steps == *",exp_gemm,"* ]]; then
  IFS=';' read -ra exp_options <<<"${FO_EXP_OPTIONS:-}"
  for opt in "${exp_options[@]}"; do
    tag=$(echo "$opt" | tr -c 'A-Za-z0-9=' '_' | sed 's/^_*//; s/_*$//')
    step exp_gemm 150 env FO_NVRTC_OPTIONS="$opt" python3 scripts/bench/bench_gemm.py \
      ${FO_EXP_ARGS:---graph --rounds 20 --M 2048 8192 --N 8192 --K 1024 4096 8192} --out "$OUT/data/exp/gemm_${tag}.csv"
  done
fi
step signal_cost 200 python3 scripts/profile/profile_signal_cost.py ${FO_SIGNAL_COST_ARGS:---repeat 5} --out "$OUT/data/gemm_portable_signal_cost.csv"
step stall_sites 300 python3 scripts/profile/profile_stall_sites.py ${FO_STALL_ARGS:-} --out-dir "$OUT/data/stall_sites"
step bench_sm90 300 python3 scripts/bench/bench_gemm_sm90.py ${FO_SM90_ARGS:-} --out "$OUT/data/gemm_sm90.csv"
# Ours against cuBLAS under Nsight Compute on the slowest LLM shapes (cycles, L2 bytes, pipes, stalls).
step sm90_ncu 240 python3 scripts/profile/profile_sm90_vs_cublas.py ${FO_SM90_NCU_ARGS:-} --out "$OUT/data/sm90_ncu.csv"
# The same, opcode by opcode: warp instructions per 128 x 128 x 64 block of work, ours against cuBLAS.
step sm90_sass 240 python3 scripts/profile/profile_sm90_sass.py ${FO_SM90_SASS_ARGS:-} --out-dir "$OUT/data/sm90_sass"
# Two trees' kernels on the LLM shapes (.baseline/: `git archive <sha> fo_lib scripts data/h200/gemm_sm90_tiles.*`),
# A B A B processes, autotuning off; FO_AB_ARGS e.g. "--pairs 2 --rounds 10 --b-options=-DNAME=1" (split at
# spaces: one -D per --b-options). Each tree reads its own committed table, or both the one sm90_tiles
# recorded earlier in the call (FO_SM90_TILES). ~25 s a process.
step sm90_ab 560 python3 scripts/bench/ab_sm90_llm.py --a .baseline --b . ${FO_AB_ARGS:-} --out-dir "$OUT/data/sm90_ab"
# Does autotuning pick what the LLM benchmark measures as fastest? Each shape's shortlist timed as
# autotuning times it and as the benchmark does, in one process. ~20 s.
step tune_agree 300 python3 scripts/bench/autotune_agreement.py ${FO_TUNE_AGREE_ARGS:-} --out "$OUT/data/autotune_agreement.csv"
step sm90_llm 150 python3 scripts/bench/bench_gemm_sm90_llm.py "${tiles_arg[@]}" ${FO_SM90_LLM_ARGS:-} --out "$OUT/data/gemm_sm90_llm.csv"
step bench_postops 120 python3 scripts/bench/bench_postops.py ${FO_POSTOPS_ARGS:-} --out "$OUT/data/postops.csv"
step launch 120 python3 scripts/bench/bench_launch.py --out "$OUT/data/launch_host_time.csv"
step profile 200 ncu --clock-control none -k regex:fo_gemm_nt --launch-skip 3 --launch-count 5 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --metrics smsp__inst_executed.sum,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,launch__registers_per_thread python3 scripts/profile/profile_gemm.py
step record 120 bash -c "python3 scripts/record/record_experiments.py && cp data/*/wave_pattern.* $OUT/data/"
step host_path 120 python3 scripts/profile/profile_host_path.py --profile
step timeline 200 python3 scripts/record/record_timeline.py --out "$OUT/data"
step engine 300 python3 -m pytest -q -rs -p no:cacheprovider --timeout 120 tests/gpu/test_engine*_gpu.py tests/gpu/test_loopback_link_gpu.py
# Multi-GPU (2+ GPUs): correctness with NCCL, then curves, footprint and the speedup sweep.
step multi_gpu "${FO_MULTI_LIMIT:-560}" env FO_DATA_OUT="$OUT/data/multi" bash scripts/multi_gpu.sh ${FO_MULTI_ARGS:-}
# The engine's host time per eager call against another tree (.baseline/: e.g. `git archive <sha> fo_lib`).
step engine_host 300 python3 scripts/bench/bench_engine_host.py --roots .baseline . ${FO_ENGINE_HOST_ARGS:-} --out "$OUT/data/engine_host_time.csv"
# Every notebook with small sweeps, measured where this machine has the GPUs it needs (needs papermill: carry the wheels); the data sets
# and figures it writes come back in data.tgz.
if [[ $steps == *",run_all_quick,"* ]]; then
  step run_all_quick 480 env FO_NO_VENV=1 ./run_all.sh --quick
  mkdir -p "$OUT/data/run_all_quick" && cp -r data/*-quick figures notebooks/output "$OUT/data/run_all_quick/" 2>/dev/null
fi
# The explorer's measure control: its round trip (first, repeated) and three shapes' partition spaces.
step explorer 400 python3 scripts/bench/bench_explorer.py --measure --out "$OUT/data/explorer_measure.csv" --figure-dir "$OUT/data/figures"
# The predictor on seeded shapes no benchmark uses, every partition timed (after calibrate: its constants).
step heldout 560 python3 scripts/bench/bench_predictor_heldout.py ${FO_HELDOUT_ARGS:---shapes 4 --primitives all_reduce} --out "$OUT/data/predictor_heldout.csv"
step bench_overlap 300 python3 scripts/bench/bench_overlap.py ${FO_OVERLAP_ARGS:-} --out "$OUT/data/overlap_loopback.csv"
# Fig. 13 and Fig. 14 on one GPU over the emulated link (notebooks 10 and 11 replay these files).
# Into data/<gpu>[-quick]/ of the archive: record_figures.py refuses a quick record in a full folder.
figures_out="$OUT/data/$(python3 -c 'from fo_lib.provenance import gpu_tag; print(gpu_tag())' 2>/dev/null || echo gpu)"
[[ " ${FO_FIGURES_ARGS:---quick} " == *" --quick "* ]] && figures_out+="-quick"
step heatmap 240 python3 scripts/record/record_figures.py ${FO_FIGURES_ARGS:---quick} --only heatmap --out-dir "$figures_out"
step ablation 180 python3 scripts/record/record_figures.py ${FO_FIGURES_ARGS:---quick} --only ablation --out-dir "$figures_out"
# Fig. 12 / Table 4: a Llama TP block and a Mixtral MoE combine step over the emulated link (notebook 13 replays this file).
step e2e 240 python3 scripts/bench/bench_e2e_layer.py --quick --out "$OUT/data/e2e_layer.csv"
# Everything under data/ comes back as one archive (a call brings back at most 8 files).
if [ -n "$(ls -A "$OUT/data" 2>/dev/null)" ]; then tar czf "$OUT/data.tgz" -C "$OUT/data" . && rm -rf "$OUT/data"; fi
echo "--- summary"; printf '%s\n' "${summary[@]}" | tee -a "$log"
grep -E "passed|failed|error" "$log" | grep -E "^[0-9]+ (passed|failed)|ERROR SUMMARY|sanitize: ok|geomean|signal .*vs plain|worst" | tail -n 20
grep -E "^cuBLAS / ours|^raster spread|^tile table|^measure round trip|rank correlation|^seed |mean error" "$log" | tail -n 12 || true
