#!/usr/bin/env bash
# shows: the copy-task Transformer trained in seconds, decoded greedily and with beam search
# The Annotated Transformer's copy task: a 2-layer Transformer (post-LN, d_model 32, 4 heads, ff 64, dropout 0.1)
# learns to copy sequences of 10 tokens drawn from 1..10, with Adam under the Noam schedule (warmup 400), and
# greedy decoding of "1 2 3 4 5 6 7 8 9 10" returns it (the validation file holds that one line: exact_match 1).
# The notebook's vocabulary of 11 is the 10 symbols and its <blank>; here the 10 symbols and the 4 special
# tokens. About 6 s of CPU (600 steps, one thread). The loss curve is in docs/transformer.md.
# With --check, compares what it prints against expected.txt (a ctest case).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../lib/common.sh"
walk() {
  cd "$work"
  export PATH="$here:$PATH" LC_ALL=C
  run "make_data.sh 2000 1 > train.tsv; head -n 2 train.tsv    # source TAB target: 10 tokens from 1..10"
  run "printf '1 2 3 4 5 6 7 8 9 10\t1 2 3 4 5 6 7 8 9 10\n' > one.tsv"
  run "seq2seq-train --train train.tsv --valid one.tsv --tokenizer space --model transformer --layers 2 \\
    --d-model 32 --heads 4 --ff 64 --schedule noam --warmup 400 --lr 0.00442 --steps 600 --batch 32 \\
    --threads 1 --log-every 100 --save copy.json --metrics copy.jsonl > summary.json"
  # greedy decoding of 1..10 (the validation line) after each 100 steps: exact_match 1 from step 300 on
  run_figures "grep -o '\"exact_match\":[0-9.]*,\"grad_norm\"' copy.jsonl | cut -d, -f1 | tail -n 3"
  run "grep -o '\"exact_match\":[0-9.]*' summary.json"
  # the checkpoint decoded by transformer-decode (greedy, KV cache)
  run "transformer-decode copy.json --src '1 2 3 4 5 6 7 8 9 10' --attention --heatmap copy.svg | grep -o '\"text\":\"[^\"]*\"'"
  # beam search (4 beams, GNMT length penalty 0.6): the best of the 2 hypotheses kept is the copy too
  run "transformer-decode copy.json --src '1 2 3 4 5 6 7 8 9 10' --strategy beam --beam 4 --n-best 2 --length-penalty 0.6 | grep -o '\"text\":\"[^\"]*\"' | head -n 1"
  keep copy.svg
}
walk_or_check "$@"
