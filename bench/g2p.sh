#!/usr/bin/env bash
# Grapheme-to-phoneme on the CMU Pronouncing Dictionary (Debian's festlex-cmu), a real-data example:
# examples/06-g2p-data/prepare.sh writes train/valid/test TSV (split by word), seq2seq-train trains an LSTM
# encoder-decoder with attention (spelling by characters -> phonemes by spaces), and seq2seq-eval
# (docs/seq2seq-eval.md) scores the held-out test words: PER (edit distance to the closest pronunciation / its
# length) and WER (words whose prediction equals none of their pronunciations).
# The training curve (validation loss, token accuracy and line-level exact match every --log-every steps) is in
# $ATTNKIT_BENCH_OUT/NAME.jsonl; the figures of runs are in docs/seq2seq-train.md ("G2P"). The cosine schedule lasts
# --steps.
#
# Recipes (--recipe):
#   base   bidirectional LSTM 128 per direction, additive attention, dropout 0.1, 12000 steps, 200 warmup steps;
#          greedy decoding of the last checkpoint.
#   wide   bidirectional LSTM 256 per direction, additive attention, dropout 0.2, label smoothing 0.1, 24000
#          steps, 500 warmup steps (fits 30 minutes on 2 cores); the last 5 saves (every 1000 steps,
#          --keep-last 5) are averaged (seq2seq-train --average), and the last checkpoint and the average are
#          scored greedy and with beam search (beam 5).
#   ensemble the wide model, trained twice at once from seeds 1 and 2 (--models N: N times), each process on one
#          thread (--threads 1 each: two processes on 2 cores train more examples a second than one on two
#          threads), with batches of similar lengths (--maxi-batch 100), 23000 steps each (fits 30 minutes);
#          each model and their ensemble (seq2seq-eval --ensemble) scored greedy and with beam search (beam 5).
#   rescore  as ensemble, but the second model learns its targets right to left (seq2seq-train --right-left): each
#          model scored alone, then the left-to-right model's beam (beam 5) rescored by the right-to-left one
#          (seq2seq-eval --rescore) and the other way round, then the union of both models' beams rescored by both
#          (--rescore-union).
#          --hidden H: both models H per direction (256). On a processor with AVX512_BF16 the products in bfloat16
#          (-- --matmul-precision bf16) train 1.5 times the steps a second, so that 30 minutes hold 16500 steps of
#          the 320-wide pair on a Zen 4: bench/g2p.sh --recipe rescore --hidden 320 --steps 16500 -- --matmul-precision bf16
#          --restart-at N (ensemble, rescore): each model first trains a cosine schedule of N steps, then resumes
#          with --steps the run's total, a warm restart (the rate of step N of the longer cosine, down to 0 again;
#          the same steps in all): bench/g2p.sh --recipe rescore --hidden 320 --steps 16500 --restart-at 9000 -- --matmul-precision bf16
#          --pairs N (rescore): N pairs, one after another (pair k: seeds 2k-1 left to right, 2k right to left), then
#          each model alone and all of them: the left-to-right models decode together (--ensemble), the right-to-left
#          ones rescore, and every model searches its own beam (--rescore-union). N times the training time.
#          After the pair(s), a graphone model (graphone-train, docs/graphone-train.md: Sequitur's joint-sequence
#          family, order 4) learns the same pairs in seconds, and the joined beams are rescored once more with it
#          beside the two models (--rescore-graphone, --graphone-weight W: 0.5, --graphone-weight): the figure the
#          recipe is quoted by; the training time printed includes it.
# --more-words: the models learn from train.tsv and the lines of valid.tsv whose words the curve's set (below) does
# not hold (train-more.tsv, 4% more pronunciations); valid.tsv is then no longer held out, test.tsv still is.
#
# The curve's validation set is every 5th line of valid.tsv (about 1000 pronunciations, spread over the alphabet),
# to keep the periodic greedy decoding cheap; the final figures are on all of test.tsv.
#
# --transformer trains a Transformer instead (3 + 3 layers, d 128, 4 heads, ff 512, label smoothing 0.1, lr 0.0015,
# 500 warmup steps), to compare the two at the same training time (docs/transformer.md); give --steps to fit it.
#
# Usage: bench/g2p.sh [--recipe base|wide|ensemble|rescore | --transformer] [--steps N] [--threads N] [--log-every N]
#                     [--models N (ensemble: models trained at once, 2)] [--hidden H (ensemble, rescore: 256)]
#                     [--restart-at N (ensemble, rescore)] [--pairs N (rescore: 1)] [--more-words]
#                     [--graphone-weight W (rescore: 0.5)]
#                     [--save-every N (wide: the saves averaged, 1000)] [-- extra seq2seq-train options]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${ATTNKIT_BIN:-$here/../build/bin}"
out="${ATTNKIT_BENCH_OUT:-/tmp/seq2seq-g2p}"
steps=
threads=2
model=lstm
recipe=base
log_every=1000
save_every=1000
extra=()
models=2
models_given=0
hidden=256
hidden_given=0
restart_at=
pairs=1
pairs_given=0
more_words=0
graphone_weight=0.5
graphone_given=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --log-every) log_every="$2"; shift 2 ;;
    --transformer) model=transformer; shift ;;
    --recipe) recipe="$2"; shift 2 ;;
    --save-every) save_every="$2"; shift 2 ;;
    --models) models="$2"; models_given=1; shift 2 ;;
    --hidden) hidden="$2"; hidden_given=1; shift 2 ;;
    --restart-at) restart_at="$2"; shift 2 ;;
    --pairs) pairs="$2"; pairs_given=1; shift 2 ;;
    --more-words) more_words=1; shift ;;
    --graphone-weight) graphone_weight="$2"; graphone_given=1; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "g2p.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ $recipe == rescore ]] && (( models_given )); then
  echo "g2p.sh: --models goes with --recipe ensemble (rescore trains two: one each way)" >&2; exit 2
fi
if (( hidden_given )) && [[ $model != lstm || ( $recipe != ensemble && $recipe != rescore ) ]]; then
  echo "g2p.sh: --hidden goes with --recipe ensemble or rescore (the other recipes fix their sizes)" >&2; exit 2
fi
if [[ -n "$restart_at" ]] && [[ $model != lstm || ( $recipe != ensemble && $recipe != rescore ) ]]; then
  echo "g2p.sh: --restart-at goes with --recipe ensemble or rescore" >&2; exit 2
fi
if (( graphone_given )) && [[ $model != lstm || $recipe != rescore ]]; then
  echo "g2p.sh: --graphone-weight goes with --recipe rescore" >&2; exit 2
fi
if (( pairs_given )) && [[ $model != lstm || $recipe != rescore ]]; then
  echo "g2p.sh: --pairs goes with --recipe rescore" >&2; exit 2
fi
if ! [[ $pairs =~ ^[1-9][0-9]?$ ]]; then
  echo "g2p.sh: --pairs $pairs: give a number of pairs from 1 to 99" >&2; exit 2
fi
mkdir -p "$out"
if [[ ! -s "$out/data/train.tsv" ]]; then
  "$here/../examples/06-g2p-data/prepare.sh" "$out/data"
fi
awk 'NR % 5 == 0' "$out/data/valid.tsv" > "$out/data/valid-curve.tsv"
train="$out/data/train.tsv"
if (( more_words )); then
  # train.tsv and the lines of valid.tsv whose words the curve's set does not hold (none of their pronunciations)
  train="$out/data/train-more.tsv"
  awk -F'\t' 'NR == FNR { curve[$1] = 1; next } !($1 in curve)' "$out/data/valid-curve.tsv" "$out/data/valid.tsv" |
    cat "$out/data/train.tsv" - > "$train"
  echo "training data: train.tsv and $(( $(wc -l < "$train") - $(wc -l < "$out/data/train.tsv") )) lines of valid.tsv (train-more.tsv)"
fi
average=0
if [[ $model == lstm && ( $recipe == ensemble || $recipe == rescore ) ]]; then
  # N processes of one thread each, at once; then each model and the ensemble (or the rescored beams) scored
  steps="${steps:-23000}"
  if [[ -n "$restart_at" ]] && ! (( restart_at > 0 && restart_at < steps )); then
    echo "g2p.sh: --restart-at $restart_at: give a step between 0 and --steps $steps" >&2; exit 2
  fi
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  # rescore: the pairs one after another, the two models of a pair at once
  group=$models
  if [[ $recipe == rescore ]]; then models=$((2 * pairs)); group=2; fi
  t0=$(date +%s.%N)
  pids=()
  for ((k = 1; k <= models; k++)); do
    args=(--train "$train" --valid "$out/data/valid-curve.tsv" --tokenizer char --target-tokenizer space
          --model lstm --attention additive --bidirectional --hidden "$hidden" --embed 64 --dropout 0.2
          --label-smoothing 0.1 --lr 0.003 --warmup 500 --batch 64 --maxi-batch 100 --schedule cosine --clip 1
          --log-every "$log_every" --threads 1 --seed "$k" "${extra[@]}")
    [[ $recipe == rescore ]] && (( k % 2 == 0 )) && args+=(--right-left)
    rm -f "$out/g2p-ens$k.jsonl"
    if [[ -n "$restart_at" ]]; then
      # the first cosine, then the warm restart: the same run resumed with the longer --steps
      echo "\$ seq2seq-train ${args[*]} --steps $restart_at --save g2p-ens$k.safetensors --metrics g2p-ens$k.jsonl && seq2seq-train --resume g2p-ens$k.safetensors --steps $steps --log-every $log_every --threads 1 --save g2p-ens$k.safetensors --metrics g2p-ens$k.jsonl &"
      { "$bin/seq2seq-train" "${args[@]}" --steps "$restart_at" --save "$out/g2p-ens$k.safetensors" \
          --metrics "$out/g2p-ens$k.jsonl" > /dev/null &&
        "$bin/seq2seq-train" --resume "$out/g2p-ens$k.safetensors" --steps "$steps" --log-every "$log_every" \
          --threads 1 --save "$out/g2p-ens$k.safetensors" --metrics "$out/g2p-ens$k.jsonl" \
          > "$out/g2p-ens$k.summary.json"; } &
    else
      args+=(--steps "$steps")
      echo "\$ seq2seq-train ${args[*]} --save g2p-ens$k.safetensors --metrics g2p-ens$k.jsonl &"
      "$bin/seq2seq-train" "${args[@]}" --save "$out/g2p-ens$k.safetensors" --metrics "$out/g2p-ens$k.jsonl" \
        > "$out/g2p-ens$k.summary.json" &
    fi
    pids+=($!)
    if (( k % group == 0 )); then
      for pid in "${pids[@]}"; do wait "$pid"; done
      pids=()
    fi
  done
  t1=$(date +%s.%N)
  echo "training wall time: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f s", b - a }'); load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  if [[ $recipe == rescore ]]; then
    # the graphone model of the same pairs, after the neural ones
    echo "\$ graphone-train --train ${train##*/} --tokenizer char --target-tokenizer space --order 4 --save g2p.graphone.safetensors"
    "$bin/graphone-train" --train "$train" --tokenizer char --target-tokenizer space --order 4 \
      --save "$out/g2p.graphone.safetensors"
    t2=$(date +%s.%N)
    echo "graphone model: $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f s", b - a }'); training wall time in all: $(awk -v a="$t0" -v b="$t2" 'BEGIN { printf "%.1f s", b - a }')"
    for ((k = 1; k <= models; k++)); do
      echo "\$ seq2seq-eval g2p-ens$k.safetensors test.tsv --format table"
      "$bin/seq2seq-eval" "$out/g2p-ens$k.safetensors" "$out/data/test.tsv" --threads "$threads" --format table
    done
    if (( pairs == 1 )); then
      for k in 1 2; do
        other=$((3 - k))
        echo "\$ seq2seq-eval g2p-ens$k.safetensors test.tsv --strategy beam --beam 5 --format table"
        "$bin/seq2seq-eval" "$out/g2p-ens$k.safetensors" "$out/data/test.tsv" --threads "$threads" --strategy beam \
          --beam 5 --format table
        echo "\$ seq2seq-eval g2p-ens$k.safetensors test.tsv --strategy beam --beam 5 --rescore g2p-ens$other.safetensors --format table"
        "$bin/seq2seq-eval" "$out/g2p-ens$k.safetensors" "$out/data/test.tsv" --threads "$threads" --strategy beam \
          --beam 5 --rescore "$out/g2p-ens$other.safetensors" --format table
      done
    fi
    # all of them: the left-to-right models decode together (--ensemble), the right-to-left ones rescore, and each
    # searches its own beam too (--rescore-union)
    together=()
    for ((k = 3; k <= models; k += 2)); do together+=(--ensemble "$out/g2p-ens$k.safetensors"); done
    for ((k = 2; k <= models; k += 2)); do together+=(--rescore "$out/g2p-ens$k.safetensors"); done
    echo "\$ seq2seq-eval g2p-ens1.safetensors test.tsv --strategy beam --beam 5 ${together[*]//$out\//} --rescore-union --format table"
    "$bin/seq2seq-eval" "$out/g2p-ens1.safetensors" "$out/data/test.tsv" --threads "$threads" --strategy beam \
      --beam 5 "${together[@]}" --rescore-union --format table
    # and with the graphone model beside them
    echo "\$ seq2seq-eval g2p-ens1.safetensors test.tsv --strategy beam --beam 5 ${together[*]//$out\//} --rescore-union --rescore-graphone g2p.graphone.safetensors --graphone-weight $graphone_weight --format table"
    "$bin/seq2seq-eval" "$out/g2p-ens1.safetensors" "$out/data/test.tsv" --threads "$threads" --strategy beam \
      --beam 5 "${together[@]}" --rescore-union --rescore-graphone "$out/g2p.graphone.safetensors" \
      --graphone-weight "$graphone_weight" --format table
    exit 0
  fi
  ensemble=()
  for ((k = 2; k <= models; k++)); do ensemble+=(--ensemble "$out/g2p-ens$k.safetensors"); done
  for strategy in greedy beam; do
    beam=(); [[ $strategy == beam ]] && beam=(--strategy beam --beam 5)
    for ((k = 1; k <= models; k++)); do
      echo "\$ seq2seq-eval g2p-ens$k.safetensors test.tsv ${beam[*]} --format table"
      "$bin/seq2seq-eval" "$out/g2p-ens$k.safetensors" "$out/data/test.tsv" --threads "$threads" "${beam[@]}" --format table
    done
    echo "\$ seq2seq-eval g2p-ens1.safetensors test.tsv ${ensemble[*]##*/} ${beam[*]} --format table"
    "$bin/seq2seq-eval" "$out/g2p-ens1.safetensors" "$out/data/test.tsv" "${ensemble[@]}" --threads "$threads" \
      "${beam[@]}" --format table
  done
  exit 0
elif [[ $model == lstm && $recipe == base ]]; then
  model_args=(--model lstm --attention additive --bidirectional --hidden 128 --embed 64 --dropout 0.1 --lr 0.003
              --warmup 200)
  steps="${steps:-12000}"
elif [[ $model == lstm && $recipe == wide ]]; then
  model_args=(--model lstm --attention additive --bidirectional --hidden 256 --embed 64 --dropout 0.2
              --label-smoothing 0.1 --lr 0.003 --warmup 500)
  steps="${steps:-24000}"
  average=5
elif [[ $model == lstm ]]; then
  echo "g2p.sh: --recipe is base, wide, ensemble or rescore, not $recipe" >&2; exit 2
else
  model_args=(--model transformer --layers 3 --heads 4 --d-model 128 --ff 512 --dropout 0.1 --label-smoothing 0.1
              --lr 0.0015 --warmup 500)
  steps="${steps:-12000}"
fi
name=g2p
[[ $model == lstm ]] || name=g2p-transformer
[[ $recipe == base ]] || name=g2p-$recipe
# the wide recipe keeps its last saves for averaging (binary checkpoints: quicker to write than JSON)
ext=json
save_args=()
if (( average > 0 )); then
  ext=safetensors
  save_args=(--save-every "$save_every" --keep-last "$average")
fi
args=(--train "$train" --valid "$out/data/valid-curve.tsv" --tokenizer char --target-tokenizer space
      "${model_args[@]}" --batch 64 --schedule cosine --clip 1 --steps "$steps" --log-every "$log_every"
      --threads "$threads" "${save_args[@]}" "${extra[@]}")
echo "\$ seq2seq-train ${args[*]} --save $name.$ext --metrics $name.jsonl"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -f "$out/$name.jsonl" "$out/$name".step*."$ext"
t0=$(date +%s.%N)
"$bin/seq2seq-train" "${args[@]}" --save "$out/$name.$ext" --metrics "$out/$name.jsonl"
t1=$(date +%s.%N)
echo "training wall time: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f s", b - a }'); load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "\$ seq2seq-eval $name.$ext test.tsv --show 5 --format table"
"$bin/seq2seq-eval" "$out/$name.$ext" "$out/data/test.tsv" --threads "$threads" --show 5 --format table
if (( average > 0 )); then
  echo "\$ seq2seq-eval $name.$ext test.tsv --strategy beam --beam 5 --format table"
  "$bin/seq2seq-eval" "$out/$name.$ext" "$out/data/test.tsv" --threads "$threads" --strategy beam --beam 5 --format table
  # the saves --keep-last kept, by step
  mapfile -t kept < <(for f in "$out/$name".step*."$ext"; do s="${f##*.step}"; echo "${s%%.*} $f"; done | sort -n |
                      tail -n "$average" | cut -d' ' -f2-)
  echo "\$ seq2seq-train --average ${kept[*]##*/} --save $name-avg.$ext"
  "$bin/seq2seq-train" --average "${kept[@]}" --save "$out/$name-avg.$ext"
  for strategy in greedy beam; do
    beam=(); [[ $strategy == beam ]] && beam=(--strategy beam --beam 5)
    echo "\$ seq2seq-eval $name-avg.$ext test.tsv ${beam[*]} --format table"
    "$bin/seq2seq-eval" "$out/$name-avg.$ext" "$out/data/test.tsv" --threads "$threads" "${beam[@]}" --format table
  done
fi
