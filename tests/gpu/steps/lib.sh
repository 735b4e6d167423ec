# shellcheck shell=bash disable=SC2034
# The helpers and settings the steps share, sourced by tests/gpu/run-all (after it has set OUT
# and WORK and changed to the repository's root) before the steps it runs. Not a step. The
# steps share their state through globals (failed, model, case, timed_line, sfx, ...): hence
# the shellcheck directive at the top of each step's script.

failed=0
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
# expect NAME WANT_RC CMD...: runs CMD with its output in $OUT/NAME.log.
expect() {
  local name="$1" want="$2"
  shift 2
  local t0=$SECONDS
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  if [ "$rc" -eq "$want" ]; then note "PASS $name (exit $rc, $((SECONDS - t0)) s)"
  else note "FAIL $name (exit $rc, wanted $want, $((SECONDS - t0)) s): $*"; failed=1; fi
  return "$rc"
}
# A step gets at most what is left of BUDGET seconds (default 560) counted from the start of
# run-all, less $1.
left() { local l=$(( ${BUDGET:-${V4_BUDGET:-560}} - SECONDS - ${1:-0} )); echo $(( l > 1 ? l : 1 )); }
# fits NAME SECS: true when at least SECS seconds are left; else a SKIP line (run the step
# again: what it built stays in $WORK) and the run counts as failed.
fits() {
  [ "$(left)" -ge "$2" ] && return 0
  note "SKIP $1: needs about $2 s, $(left) s left of the budget (run the step again: what is built stays in $WORK)"
  failed=1
  return 1
}
# wanted PART: true when REAL4_BENCH (default "hip kernel hf") names PART of real4-bench.
wanted() { [[ " ${REAL4_BENCH:-hip kernel hf} " == *" $1 "* ]]; }
# skipping NAME KNOB: true (and a SKIP line) when KNOB=1 asks to leave out what needs it.
skipping() {
  [ "${!2:-0}" = 1 ] || return 1
  note "SKIP $1 ($2=1)"
  return 0
}

# The long steps at real size by default; REAL_SMALL=1: the same commands on the small preset
# with short prompts, its files named *-small in $WORK.
if [ "${REAL_SMALL:-0}" = 1 ]; then
  sfx=-small
  : "${REAL_PRESET:=small}" "${REAL_LEN:=256}" "${V4_PRESET:=small}" "${V4_LEN:=128}"
  : "${ANCHOR_LEN:=160}" "${ORACLE_LEN:=160}"
else
  sfx=
fi
REAL_PRESET="${REAL_PRESET:-v4-flash-dims}" REAL_LAYERS="${REAL_LAYERS:-0-3}" REAL_LEN="${REAL_LEN:-4096}"
# What real4's golden stores: the layer outputs and sub-layer outputs, the selections and the
# scores they are chosen on (a hip run replays them), the compressed KV, the head and the
# logits: 7.9 GB of the 37.6 GB at 4096 tokens (lm_head/logits alone 4.2 GB).
REAL_STORE="${REAL_STORE:-*.hc_ffn.post,*.hc_attn.post,*.attn.o_b,*.moe.out,*.moe.router,*.moe.select,*.moe.weights,*.attn.idx.score,*.attn.idx.topk,*.attn.cmp.rope,final.*,lm_head}"
V4_PRESET="${V4_PRESET:-v4-flash-dims}" V4_LEN="${V4_LEN:-1024}"
ANCHOR_LEN="${ANCHOR_LEN:-2304}" ANCHOR_EXPERTS="${ANCHOR_EXPERTS:-8}" ANCHOR_VOCAB="${ANCHOR_VOCAB:-4096}"
ORACLE_LEN="${ORACLE_LEN:-2304}" ORACLE_EXPERTS="${ORACLE_EXPERTS:-16}" ORACLE_VOCAB="${ORACLE_VOCAB:-4096}"
ORACLE_BOUND="${ORACLE_BOUND:-1e-6}" ORACLE_SCORE_BOUND="${ORACLE_SCORE_BOUND:-1e-4}"

# What each long step keeps in $WORK (its model, case and dumps), for make_room.
artefacts() {
  case "$1" in
    v4) echo "$WORK/v4$sfx $WORK/v4$sfx.h5" ;;
    v4t) echo "$WORK/v4t$sfx $WORK/v4t$sfx.h5 $WORK/v4t$sfx.h5.golden-done" ;;
    real4) echo "$WORK/real4$sfx $WORK/real4$sfx.h5" ;;
    anchor) echo "$WORK/anchor$sfx $WORK/anchor$sfx.h5 $WORK/anchor$sfx-hf.h5" ;;
    oracle) echo "$WORK/oracle$sfx $WORK/oracle$sfx.h5 $WORK/oracle$sfx-hf.h5 $WORK/oracle$sfx-hf-rope64.h5 $WORK/oracle$sfx.golden-done" ;;
    w43) echo "$WORK/w43$sfx $WORK/w43$sfx.h5 $WORK/w43$sfx.h5.golden-done" ;;
  esac
}
# make_room STEP GB: at least GB GiB free in $WORK (1 with REAL_SMALL=1), deleting the other
# long steps' artefacts (v4, real4, w43, oracle, anchor: the largest first; each deletion noted)
# unless WORK_EVICT=0; false (and a FAIL line) otherwise.
free_gb() { df -Pk "$WORK" | awk 'NR == 2 {print int($4 / 1048576)}'; }
make_room() {
  local step="$1" need="$2" other
  [ -n "$sfx" ] && need=1
  [ "$(free_gb)" -ge "$need" ] && return 0
  if [ "${WORK_EVICT:-1}" = 1 ]; then
    for other in $(for o in v4 v4t real4 w43 oracle anchor; do [ "$o" != "$step" ] && echo "$o"; done); do
      local files gb
      read -ra files <<<"$(artefacts "$other")"
      gb=$(du -sck "${files[@]}" 2>/dev/null | awk 'END {print int($1 / 1048576)}')
      [ "${gb:-0}" -gt 0 ] || continue
      rm -rf "${files[@]}"
      note "$step: deleted $other's files in $WORK ($gb GB) for room"
      [ "$(free_gb)" -ge "$need" ] && return 0
    done
  fi
  note "FAIL $step: needs $need GB free in $WORK, $(free_gb) GB free (WORK_EVICT=${WORK_EVICT:-1})"
  failed=1
  return 1
}
# The leftovers of a killed writer (synth's folder, a case update, a capture), which would fill the disk.
clear_leftovers() { local f; for f in "$@"; do rm -rf "$f".tmp-* "$f".old-*; done; rm -f "$WORK"/.capture_hf.*.h5.tmp; }

# The v4 model (27 GB: a bf16 checkpoint, its F32 tensors in float32, as the release stores
# them) and case (1 prompt of V4_LEN tokens), kept in $WORK, so that running a step again
# reuses them. Shared by the v4 steps, ref-speed, v4-fast and naive-profile.
v4_artefacts() {
  local t0=$SECONDS rc=0
  clear_leftovers "$WORK/v4$sfx" "$WORK/v4$sfx.h5"
  if [ ! -f "$WORK/v4$sfx/config.json" ]; then
    make_room v4 40 || return 1
    tdiff synth --preset "$V4_PRESET" --layers 2 --dtype bf16 --seed 1 -o "$WORK/v4$sfx" >"$OUT/v4-synth.log" 2>&1 || rc=$?
  fi
  if [ "$rc" -eq 0 ] && [ ! -f "$WORK/v4$sfx.h5" ]; then
    tdiff case new --model "$WORK/v4$sfx" --random-prompts 1 --len "$V4_LEN" --seed 1 -o "$WORK/v4$sfx.h5" \
      >>"$OUT/v4-synth.log" 2>&1 || rc=$?
  fi
  note "v4 model and case: exit $rc ($((SECONDS - t0)) s, $(du -sh "$WORK/v4$sfx" 2>/dev/null | cut -f1))"
  [ "$rc" -eq 0 ]
}
# v4-bench's runs on the v4 case, side by side: fixed (on the matrix cores), fixed with
# transformers' logits numerics (bf16 lm_head), the host copies on one copy stream instead of
# two (no two transfers share the link), with V4_VALU=1 also fixed on the vector ALU only
# (emu's bits; slow), and transformers in bf16.
v4_bench() {
  expect v4-bench-hip 0 timeout "$(left)" bench_hip "$WORK/v4$sfx.h5" --runs 3 -o "$OUT/bench_hip.json"
  expect v4-bench-hip-bf16-logits 0 timeout "$(left)" bench_hip "$WORK/v4$sfx.h5" --runs 3 --set lm_head:logits=bf16 \
    -o "$OUT/bench_hip_bf16_logits.json"
  expect v4-bench-hip-1-stream 0 timeout "$(left)" bench_hip "$WORK/v4$sfx.h5" --runs 3 --copy-streams 1 \
    -o "$OUT/bench_hip_1_stream.json"
  if [ "${V4_VALU:-0}" = 1 ]; then
    expect v4-bench-hip-valu 0 timeout "$(left)" bench_hip "$WORK/v4$sfx.h5" --runs 3 --hip-gemm vector \
      -o "$OUT/bench_hip_valu.json"
  fi
  expect v4-bench-hf 0 timeout "$(left)" python3 bench/hip/bench_hf.py --model "$WORK/v4$sfx" --case "$WORK/v4$sfx.h5" \
    --runs 3 -o "$OUT/bench_hf.json"
}
# v4-golden's runs: the reference of the v4 case, then hip fixed against it.
v4_golden() {
  expect v4-golden 0 timeout "$(left 60)" tdiff golden "$WORK/v4$sfx.h5"
  expect v4-run-hip-fixed 0 timeout "$(left)" tdiff run "$WORK/v4$sfx.h5" --backend hip --policy fixed -o "$OUT/v4-run"
}

# The real4 model in the release layout (16 GB: FP4 experts, FP8 linears; synth about 250 s),
# built when $model lacks it; false when it is not.
real4_synth() {
  if [ ! -f "$model/config.json" ]; then
    fits real4-synth "${REAL4_SYNTH_S:-300}" || return 1
    expect real4-synth 0 timeout "$(left)" tdiff synth --preset "$REAL_PRESET" --layers "$REAL_LAYERS" \
      --format release --seed 1 -o "$model" || return 1
  fi
}
# The real4 model and case (1 prompt of REAL_LEN tokens; about 40 s, checksums) in $WORK, as
# the real4 steps share them; sets model and case; false when either is missing. The case with
# REAL_STORE holds 8 GB, and as much again while tdiff run rewrites it.
real4_artefacts() {
  model="$WORK/real4$sfx" case="$WORK/real4$sfx.h5"
  clear_leftovers "$model" "$case"
  make_room real4 "$([ -f "$model/config.json" ] && echo 17 || echo 33)" || return 1
  real4_synth || return 1
  if [ ! -f "$case" ]; then
    fits real4-case 60 || return 1
    expect real4-case 0 timeout "$(left)" tdiff case new --model "$model" --random-prompts 1 --len "$REAL_LEN" \
      --seed 1 -o "$case" || return 1
  fi
}
# real4-golden's part: tdiff golden of the REAL_STORE stages under tests/gpu/measure and the
# projection to 43 layers; false when it does not fit in the budget.
real4_golden() {
  fits real4-golden 120 || return 1
  timed_golden real4-golden "$case" "$(left 30)" --stages "$REAL_STORE"
  python3 bench/refcpu/project-43.py --log "$OUT/real4-golden-timing.log" --model "$model" \
    --tokens "$REAL_LEN" >"$OUT/real4-project.log" 2>&1
  while read -r line; do note "real4 $line"; done <"$OUT/real4-project.log"
}
# real4-run's part: hip fixed on the case. Only the stored stages have a reference to compare
# with. --no-record: the run's record would rewrite the 8 GB case, which the 64 GB disk does
# not hold beside the v4 files.
real4_run() {
  if ! skipping real4-run-hip-fixed SKIP_HIP && fits real4-run-hip-fixed 90; then
    expect real4-run-hip-fixed 0 timeout "$(left)" tdiff run "$case" --backend hip --policy fixed \
      --stages "$REAL_STORE" --no-record -o "$OUT/real4-run"
    note "real4-run: $(grep -E '^(verdict|summary|first divergence|logits|tensors|time)' "$OUT/real4-run-hip-fixed.log" | tr '\n' '|')"
  fi
}

# A real-width config.json (V4-Flash's dimensions, tests/gpu/flash-config) with SET... applied;
# REAL_SMALL=1: the small preset's config instead. real_config FILE SET...
real_config() {
  local out="$1" base=()
  shift
  if [ -n "$sfx" ]; then
    [ -f "$WORK/small-config/config.json" ] ||
      tdiff synth --preset small --seed 1 -o "$WORK/small-config" >/dev/null || return 1
    base=(--base "$WORK/small-config/config.json")
  fi
  tests/gpu/flash-config "${base[@]}" "${@/#/--set=}" -o "$out"
}

# timed_golden NAME CASE LIMIT [ARG...]: tdiff golden CASE ARG... under tests/gpu/measure (time
# stamps per stage in $OUT/NAME-timing.log, GNU time's report in $OUT/NAME-timing.time), as
# the step NAME; then one line (also in $timed_line): exit, wall, stages computed, peak RSS.
timed_golden() {
  local name="$1" case="$2" limit="$3"
  shift 3
  expect "$name" 0 tests/gpu/measure "$OUT/$name-timing" "$limit" tdiff golden "$case" "$@"
  local rc=$? t="$OUT/$name-timing.time"
  local rss wall computed
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.2f GiB", $2 / 1048576}' "$t" 2>/dev/null)
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$t" 2>/dev/null)
  computed=$(sed -n 's/.*golden: \([0-9]*\) stages computed in \([0-9.]*\) s.*/\1 stages computed in \2 s/p' \
    "$OUT/$name-timing.log" 2>/dev/null)
  timed_line="exit $rc, wall ${wall:-?} (m:ss), ${computed:-no end line}, peak RSS ${rss:-?}"
  note "$name: $(basename "$case"): $timed_line"
  return "$rc"
}
# The oracle's model (layers 2,3 at real widths: CSA, HCA; ORACLE_EXPERTS experts, vocabulary
# ORACLE_VOCAB; 4.5 GB float32) and case (1 prompt of ORACLE_LEN tokens) in $WORK, for the
# step NAME (oracle-real, hf-client-real) with GB GiB free; sets model and case.
oracle_artefacts() {
  local name="$1" gb="$2"
  model="$WORK/oracle$sfx" case="$WORK/oracle$sfx.h5"
  clear_leftovers "$model" "$case"
  make_room oracle "$gb" || return 1
  if [ ! -f "$model/config.json" ]; then
    real_config "$WORK/oracle$sfx.json" n_routed_experts="$ORACLE_EXPERTS" vocab_size="$ORACLE_VOCAB" ||
      { note "FAIL $name: no config"; failed=1; return 1; }
    expect "$name-synth" 0 timeout "$(left)" tdiff synth --config "$WORK/oracle$sfx.json" --layers 2,3 --seed 1 \
      -o "$model" || return 1
  fi
  if [ ! -f "$case" ]; then
    expect "$name-case" 0 timeout "$(left)" tdiff case new --model "$model" --random-prompts 1 --len "$ORACLE_LEN" \
      --seed 1 -o "$case" || return 1
  fi
}
# The reference of every stage of the oracle's case (oracle_artefacts first), within LIMIT
# seconds, as transformers breaks top-k ties (model-spec §5.11): torch's CPU rule. A reference that
# the same tdiff binary finished in an earlier run of run-all (the marker holds the binary's
# checksum, and is newer than the case) is kept, for when the step did not fit in that run.
oracle_golden() {
  local name="$1" limit="$2" done_marker="$WORK/oracle$sfx.golden-done" tdiff_sum
  tdiff_sum=$(cksum <"$(command -v tdiff)")
  if [ "$done_marker" -nt "$case" ] && [ "$(cat "$done_marker")" = "$tdiff_sum" ]; then
    note "$name-golden: the reference of $(date -r "$done_marker" +%H:%M:%S) reused (same tdiff)"
    return 0
  fi
  rm -f "$done_marker"
  fits "$name-golden" 60 || return 1
  timed_golden "$name-golden" "$case" "$limit" --tie-rule torch-cpu || return 1
  echo "$tdiff_sum" >"$done_marker"
}
# judge_dump NAME CASE DUMP: tdiff run CASE --candidate-dump DUMP (reports in $OUT/NAME-run),
# its verdict lines on the summary.
judge_dump() {
  local name="$1" case="$2" dump="$3" rc
  tdiff run "$case" --candidate-dump "$dump" --dump-policy fixed --no-record -o "$OUT/$name-run" >"$OUT/$name-run.log" 2>&1
  rc=$?
  note "$name: exit $rc | $(grep -iE 'verdict|first divergence|logits|ranked|isolated|not in the dump|lacks|selections' "$OUT/$name-run.log" | head -9 | tr '\n' '|')"
}
# hf_client NAME HIPNAME PREFIX SECS: transformers bf16 on the GPU, `capture`, replay, `isolate`, on
# $model and $case (each given about SECS seconds; the dump PREFIX-bf16-MODE.h5, deleted once
# judge_dump has judged it), then tdiff's hip `fixed` on the same case (the run HIPNAME).
# HF_MODES (default "capture replay isolate") picks the modes, SKIP_HIP=1 leaves hip out: a step cut
# by the budget goes on, run again, with what is left.
hf_client() {
  local name="$1" hip="$2" prefix="$3" secs="$4" mode dump
  for mode in ${HF_MODES:-capture replay isolate}; do
    dump="$prefix-bf16-$mode.h5"
    rm -f "$dump"
    fits "$name-$mode" "$secs" || continue
    # shellcheck disable=SC2046
    expect "$name-$mode" 0 env PYTHONPATH=python timeout "$(left)" python3 -m tdiff_capture $(hf_mode_args "$mode") \
      --model "$model" --case "$case" -o "$dump" --dtype bfloat16 --device cuda &&
      note "$name-$mode: $(hf_timing "$OUT/$name-$mode.log")"
    [ -f "$dump" ] && judge_dump "$name-$mode" "$case" "$dump"
    rm -f "$dump"
  done
  skipping "$hip" SKIP_HIP || ! fits "$hip" 60 || {
    tdiff run "$case" --backend hip --policy fixed --no-record -o "$OUT/$hip-run" >"$OUT/$hip-run.log" 2>&1
    note "hip fixed, same case: exit $? | $(grep -iE 'verdict|first divergence|logits' "$OUT/$hip-run.log" | head -4 | tr '\n' '|')"
  }
}
# tdiff-capture's arguments for a mode of HF_MODES: capture (free), replay, isolate.
hf_mode_args() { case "$1" in replay) echo "capture --selections replay" ;; *) echo "$1" ;; esac; }
# The forward-time line of python/capture_hf.py's log.
hf_timing() { sed -n 's/^# timing: //p' "$1" 2>/dev/null; }
# The wall clock of a tests/gpu/measure PREFIX (its PREFIX.time), as m:ss.
measured_wall() { awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$1.time"; }
