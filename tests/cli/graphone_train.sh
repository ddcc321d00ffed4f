#!/usr/bin/env bash
# graphone-train end to end (docs/graphone-train.md) and the graphone model as a rescorer of seq2seq-eval and
# transformer-decode (--rescore-graphone, --graphone-weight):
#   - the summary: pairs, unaligned (a target longer than twice its source: counted, and said on stderr), graphones
#     and ngrams as the model file holds them, order, log_likelihood (iterations - 1 values, non-decreasing);
#   - deterministic: the same pairs twice (from a file or standard input) give the same bytes; the .safetensors and
#     .npz saves hold the .json's model (tensor get gives the same JSON) and rescore exactly alike;
#   - the scores: every rescored best hypothesis of transformer-decode is the argmax of (score + W log P(x, y)) /
#     (1 + W) over the beam, log P(x, y) computed here from the model file by the formulas of
#     lib/attnkit/models/graphone.hpp (Viterbi segmentation under the unigram probabilities, interpolated absolute
#     discounting), and its "normalized" is that value; --graphone-weight 0 changes no report; a graphone model of
#     the test pairs lowers the WER of a weak model's beam;
#   - the error contract: usage errors exit 2, bad input 1 naming the file (or the model's field), nothing on stdout,
#     no model file left.
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$src/tests/cli/lib/common.sh"  # fail, expect_error, finish
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

# log P(x, y) of a graphone model file, as models/graphone.hpp specifies it (written here, not the library's)
cat > gscore.py <<'PY'
import json, math, struct

def f32(x):  # the file's float32 value, as the reader holds it
    return struct.unpack("f", struct.pack("f", float(x)))[0]

class Model:
    def __init__(self, path):
        d = json.load(open(path))
        self.order, self.D = int(d["config"]["order"]), float(d["config"]["discount"])
        self.src = {t: i for i, t in enumerate(d["vocab"]["source"]["tokens"])}
        self.tgt = {t: i for i, t in enumerate(d["vocab"]["target"]["tokens"])}
        self.units, self.unit_of = [None], {}
        for row in d["graphones"]:
            key = (tuple(int(v) for v in row[:2] if v >= 0), tuple(int(v) for v in row[2:4] if v >= 0))
            self.unit_of[key] = len(self.units)
            self.units.append((key[0], key[1], f32(row[4])))
        self.V = len(self.units)  # the graphones and the end marker (graphone 0)
        self.ngram = [dict() for _ in range(self.order)]
        self.ctx = [dict() for _ in range(self.order)]
        for m in range(1, self.order + 1):
            for row in d["counts"][str(m)]:
                ids, c = tuple(int(v) for v in row[:m]), int(row[m])
                self.ngram[m - 1][ids] = c
                total, types = self.ctx[m - 1].get(ids[:-1], (0, 0))
                self.ctx[m - 1][ids[:-1]] = (total + c, types + 1)

    def align(self, x, y):  # Viterbi under the unigram log-probabilities; ties: the first found
        n, m = len(x), len(y)
        best, back = {(0, 0): 0.0}, {}
        for i in range(n):
            for j in range(m + 1):
                if (i, j) not in best:
                    continue
                for dx in (1, 2):
                    for dy in (0, 1, 2):
                        if i + dx > n or j + dy > m:
                            continue
                        u = self.unit_of.get((tuple(x[i:i + dx]), tuple(y[j:j + dy])))
                        if u is None:
                            continue
                        v = best[(i, j)] + self.units[u][2]
                        if v > best.get((i + dx, j + dy), -math.inf):
                            best[(i + dx, j + dy)], back[(i + dx, j + dy)] = v, u
        if (n, m) not in best:
            return None
        out, i, j = [], n, m
        while i > 0 or j > 0:
            u = back[(i, j)]
            out.append(u)
            i, j = i - len(self.units[u][0]), j - len(self.units[u][1])
        return out[::-1]

    def prob(self, history, q):  # interpolated absolute discounting, from p_0 = 1 / V up to the order
        gram = ([0] * (self.order - 1) + history)[len(history):] + [q]  # the last n-1, padded with starts
        p = 1.0 / self.V
        for m in range(1, self.order + 1):
            g = tuple(gram[len(gram) - m:])
            if g[:-1] not in self.ctx[m - 1]:
                continue
            total, types = self.ctx[m - 1][g[:-1]]
            p = max(self.ngram[m - 1].get(g, 0) - self.D, 0) / total + self.D * types / total * p
        return p

    def log_prob(self, src_tokens, tgt_tokens):
        if any(t not in self.src for t in src_tokens) or any(t not in self.tgt for t in tgt_tokens):
            return -math.inf
        q = self.align([self.src[t] for t in src_tokens], [self.tgt[t] for t in tgt_tokens])
        if q is None:
            return -math.inf
        lp, history = 0.0, []
        for u in q:
            lp += math.log(self.prob(history, u))
            history.append(u)
        return lp + math.log(self.prob(history, 0))
PY

# --- data: reversed digit strings (tokenizer ids, as a --task reverse checkpoint splits them)
python3 - <<'PY' || fail "making the pairs"
import random
random.seed(5)
with open("rt.tsv", "w") as f, open("rt.src", "w") as s:
    for _ in range(40):
        x = [str(random.randint(0, 9)) for _ in range(random.randint(2, 6))]
        f.write(" ".join(x) + "\t" + " ".join(reversed(x)) + "\n")
        s.write(" ".join(x) + "\n")
PY
{ cat rt.tsv; printf '1\t1 2 3\n'; } > rtu.tsv  # one target longer than twice its source

# --- the summary's fields, against the model file
graphone-train --train rtu.tsv --tokenizer ids --order 3 --iterations 6 --save g.json > sum.json 2> err.txt ||
  fail "graphone-train exited $?: $(cat err.txt)"
grep -qF "graphone-train: rtu.tsv: 1 of 41 pairs left out: no segmentation into graphones" err.txt ||
  fail "no stderr note of the pair left out: $(cat err.txt)"
python3 - <<'PY' || fail "summary: $(cat sum.json)"
import json
r, m = json.load(open("sum.json")), json.load(open("g.json"))
assert sorted(r) == ["graphones", "log_likelihood", "model", "ngrams", "order", "pairs", "unaligned"], sorted(r)
assert (r["model"], r["pairs"], r["unaligned"], r["order"]) == ("g.json", 41, 1, 3), r
assert m["format"] == "attnkit-graphone" and m["config"]["order"] == "3", m["config"]
assert m["config"]["src_tokenizer"] == m["config"]["tgt_tokenizer"] == "ids", m["config"]
assert r["graphones"] == len(m["graphones"]) > 0, (r["graphones"], len(m["graphones"]))
assert len(r["ngrams"]) == 3 and r["ngrams"] == [len(m["counts"][str(k)]) for k in (1, 2, 3)], r["ngrams"]
assert all(len(row) == k + 1 for k in (1, 2, 3) for row in m["counts"][str(k)])
# every pair but the one left out is counted: n + 1 unigrams of n graphones and the end marker, each pair once
assert sum(row[-1] for row in m["counts"]["1"] if row[0] == 0) == 40, "end markers"
ll = r["log_likelihood"]
assert len(ll) == 5, ll
assert all(b >= a - 1e-9 * abs(a) for a, b in zip(ll, ll[1:])), ("EM lowered the log-likelihood", ll)
PY
graphone-train --train rt.tsv --tokenizer ids --order 2 --iterations 1 --save one.json > one.json.sum 2> err.txt ||
  fail "--iterations 1 exited $?"
[[ ! -s err.txt ]] || fail "a file without a pair left out: stderr says $(cat err.txt)"
python3 -c 'import json; r = json.load(open("one.json.sum")); assert r["log_likelihood"] == [] and r["unaligned"] == 0 and r["ngrams"].__len__() == 2, r' ||
  fail "--iterations 1: $(cat one.json.sum)"
printf '{"src": "1 2", "tgt": "2 1"}\n{"src": "3 4 5", "tgt": "5 4 3"}\n' > two.jsonl
graphone-train --train two.jsonl --tokenizer ids --order 1 --save two.json > two.sum || fail "JSONL exited $?"
python3 -c 'import json; r = json.load(open("two.sum")); assert (r["pairs"], r["order"], len(r["ngrams"])) == (2, 1, 1), r' ||
  fail "JSONL: $(cat two.sum)"
printf '1 2\t2 1\n3 4 5 5 4 3\n6 7\t7 6\n' > onebad.tsv
graphone-train --train onebad.tsv --tokenizer ids --skip-bad-lines --save sk.json > sk.sum 2> err.txt || fail "--skip-bad-lines exited $?"
grep -qF "onebad.tsv: skipped 1 bad line; onebad.tsv:2: no tab between source and target" err.txt || fail "--skip-bad-lines: $(cat err.txt)"
python3 -c 'import json; assert json.load(open("sk.sum"))["pairs"] == 2' || fail "--skip-bad-lines: $(cat sk.sum)"

# --- deterministic, and the same model in every format
graphone-train --train rt.tsv --tokenizer ids --order 3 --save a.json > /dev/null || fail "a.json: exit $?"
graphone-train --train rt.tsv --tokenizer ids --order 3 --save b.json > /dev/null || fail "b.json: exit $?"
cmp -s a.json b.json || fail "the same pairs twice gave two models"
graphone-train --train - --tokenizer ids --order 3 --save c.json < rt.tsv > /dev/null || fail "standard input: exit $?"
cmp -s a.json c.json || fail "the pairs from standard input gave another model"
graphone-train --train rt.tsv --tokenizer ids --order 3 --discount 0.5 --save d.json > /dev/null || fail "d.json: exit $?"
cmp -s a.json d.json && fail "--discount 0.5 gave the model of 0.75"
for ext in safetensors npz; do
  graphone-train --train rt.tsv --tokenizer ids --order 3 --save "a.$ext" > /dev/null || fail "a.$ext: exit $?"
  graphone-train --train rt.tsv --tokenizer ids --order 3 --save "b.$ext" > /dev/null || fail "b.$ext: exit $?"
  cmp -s "a.$ext" "b.$ext" || fail "the same pairs twice gave two .$ext files"
  tensor get "a.$ext" | cmp -s - a.json || fail "a.$ext does not hold a.json's model"
done

# --- rescoring: checkpoints of the reverse task (tokenizer ids), a good one and a weak one
rev=(seq2seq-train --task reverse --model lstm --attention dot --hidden 32 --embed 16 --lr 0.01 --threads 1)
"${rev[@]}" --steps 300 --save good.json > /dev/null || fail "seq2seq-train (300 steps) exited $?"
"${rev[@]}" --steps 60 --save weak.json > /dev/null || fail "seq2seq-train (60 steps) exited $?"
beam=(--threads 1 --strategy beam --beam 4)
# every format rescores alike, to the bit (transformer-decode prints each best hypothesis's combined score)
for ext in json safetensors npz; do
  transformer-decode good.json "${beam[@]}" --rescore-graphone "a.$ext" --graphone-weight 0.5 < rt.src > "td.$ext" ||
    fail "transformer-decode --rescore-graphone a.$ext exited $?"
  seq2seq-eval weak.json rt.tsv "${beam[@]}" --show 40 --rescore-graphone "a.$ext" > "ev.$ext" ||
    fail "seq2seq-eval --rescore-graphone a.$ext exited $?"
done
[[ $(wc -l < td.json) == 40 ]] || fail "transformer-decode wrote $(wc -l < td.json) lines for 40 sources"
for ext in safetensors npz; do
  cmp -s td.json "td.$ext" || fail "a.json and a.$ext rescore otherwise (transformer-decode)"
  cmp -s ev.json "ev.$ext" || fail "a.json and a.$ext rescore otherwise (seq2seq-eval)"
done
# the scores and the ranking, against gscore.py: each source alone (a source none of whose hypotheses the
# graphone model can segment is left to the other models: skipped here), weights 1 and 0.5
python3 - <<'PY' || fail "the graphone rescoring does not follow the model's formulas"
import json, math, subprocess, sys
sys.path.insert(0, ".")
from gscore import Model
g = Model("a.json")
beam = ["--threads", "1", "--strategy", "beam", "--beam", "4"]
checked = changed = 0
for w in (1.0, 0.5):
    for s in open("rt.src").read().split("\n")[:-1]:
        plain = subprocess.run(["transformer-decode", "weak.json", "--src", s, "--n-best", "4"] + beam,
                               capture_output=True, text=True)
        assert plain.returncode == 0, plain.stderr
        hyps = json.loads(plain.stdout)["n_best"]
        r = subprocess.run(["transformer-decode", "weak.json", "--src", s, "--rescore-graphone", "a.json",
                            "--graphone-weight", str(w)] + beam, capture_output=True, text=True)
        combined = [(h["score"] + w * g.log_prob(s.split(), h["tokens"])) / (1 + w) for h in hyps]
        best = max(range(len(hyps)), key=lambda i: combined[i])
        if combined[best] == -math.inf:
            continue
        assert r.returncode == 0, (s, r.stderr)
        got = json.loads(r.stdout)
        assert got["tokens"] == hyps[best]["tokens"], (s, w, got, hyps, combined)
        assert abs(got["normalized"] - combined[best]) <= 1e-5 * max(1.0, abs(combined[best])), (s, w, got, combined)
        assert got["score"] == hyps[best]["score"], (got, hyps[best])
        checked += 1
        changed += best != 0
assert checked >= 60, f"only {checked} of 80 sources scored"
assert changed >= 1, "the graphone model reranked no beam: the check above checks nothing"
print(f"{checked} rescored sources checked, {changed} reranked", file=sys.stderr)
PY
# --graphone-weight 0 changes nothing; weight 1 (a model of these very pairs) lowers the weak model's WER
seq2seq-eval weak.json rt.tsv "${beam[@]}" --show 40 > ev-plain.json || fail "seq2seq-eval (beam) exited $?"
seq2seq-eval weak.json rt.tsv "${beam[@]}" --show 40 --rescore-graphone a.json --graphone-weight 0 > ev-w0.json ||
  fail "--graphone-weight 0 exited $?"
python3 - <<'PY' || fail "--graphone-weight 0 / 1: $(cat ev-plain.json ev-w0.json ev.json)"
import json
plain, w0, w1 = (json.load(open(f)) for f in ("ev-plain.json", "ev-w0.json", "ev.json"))
assert w0.pop("rescorers") == 1 and w0 == plain, "weight 0 changed the report"
assert w1["rescorers"] == 1 and plain["wer"] > 0 and w1["wer"] < plain["wer"], (plain["wer"], w1["wer"])
PY
seq2seq-eval weak.json rt.tsv "${beam[@]}" --rescore-graphone a.json --format table > table.txt || fail "table exited $?"
grep -q 'beam search (beam 4), rescored by 1 model$' table.txt || fail "table: $(head -1 table.txt)"
transformer-decode good.json "${beam[@]}" --src "$(head -1 rt.src)" --rescore good.json --rescore-graphone a.json > both.json ||
  fail "--rescore with --rescore-graphone exited $?"

# --- usage errors: exit 2, nothing on stdout, nothing written
expect_error 2 "--order: Value 0 not in range 1 to 8" graphone-train --train rt.tsv --order 0 --save u.json
expect_error 2 "--order: Value 9 not in range 1 to 8" graphone-train --train rt.tsv --order 9 --save u.json
expect_error 2 "--iterations: Value 0 not in range 1 to 100" graphone-train --train rt.tsv --iterations 0 --save u.json
expect_error 2 "--discount: 1 is not a number in (0, 1)" graphone-train --train rt.tsv --discount 1 --save u.json
expect_error 2 "--discount: 0 is not a number in (0, 1)" graphone-train --train rt.tsv --discount 0 --save u.json
expect_error 2 "--train is required" graphone-train --save u.json
expect_error 2 "--save is required" graphone-train --train rt.tsv
expect_error 2 "--save x.npy: a .npy file holds one tensor" graphone-train --train rt.tsv --tokenizer ids --save x.npy
expect_error 2 "--tokenizer: spm not in" graphone-train --train rt.tsv --tokenizer spm --save u.json
[[ ! -e u.json && ! -e x.npy ]] || fail "a refused command line left a model file"
for tool in seq2seq-eval transformer-decode; do
  if [[ $tool == seq2seq-eval ]]; then args=(good.json rt.tsv); else args=(good.json --src '1 2'); fi
  expect_error 2 "--graphone-weight goes with --rescore-graphone" $tool "${args[@]}" --strategy beam --graphone-weight 0.5
  expect_error 2 "--rescore-graphone goes with --strategy beam" $tool "${args[@]}" --rescore-graphone a.json
  expect_error 2 "--graphone-weight: -1 is negative" $tool "${args[@]}" --strategy beam --rescore-graphone a.json --graphone-weight -1
done

# --- bad input: exit 1 naming the file, no model left
expect_error 1 "missing.tsv: cannot open" graphone-train --train missing.tsv --save m.json
printf '1 2\t2 1\n3 4 5\n' > notab.tsv
expect_error 1 "notab.tsv:2: no tab between source and target" graphone-train --train notab.tsv --tokenizer ids --save m.json
: > empty.tsv
expect_error 1 "empty.tsv: the file is empty" graphone-train --train empty.tsv --save m.json
printf '\n\n' > blank.tsv
expect_error 1 "blank.tsv: no examples" graphone-train --train blank.tsv --save m.json
python3 -c 'print(" ".join(["1"] * 300) + "\t1")' > huge.tsv
expect_error 1 "huge.tsv:1: a pair of 300 and 1 tokens" graphone-train --train huge.tsv --tokenizer ids --save m.json
printf '1\t1 2 3\n2\t3 4 5\n' > allout.tsv
expect_error 1 "" graphone-train --train allout.tsv --tokenizer ids --save m.json  # no pair can be segmented
expect_error 1 "nodir/m.json: cannot create a temporary file" graphone-train --train rt.tsv --tokenizer ids --save nodir/m.json
[[ ! -e m.json ]] || fail "a refused input left a model file"
cp a.json keep.json
expect_error 1 "notab.tsv:2" graphone-train --train notab.tsv --tokenizer ids --save keep.json
cmp -s a.json keep.json || fail "a refused input changed the existing model file"

# --- --rescore-graphone given what is not a graphone model, or a damaged one: exit 1 naming the file and field
echo '{"format": "x"}' > fx.json
expect_error 1 'fx.json: format "x" is not a graphone model' seq2seq-eval good.json rt.tsv --strategy beam --rescore-graphone fx.json
expect_error 1 'good.json: format "attnkit-seq2seq" is not a graphone model' seq2seq-eval good.json rt.tsv --strategy beam --rescore-graphone good.json
expect_error 1 'nothere.json: cannot open' seq2seq-eval good.json rt.tsv --strategy beam --rescore-graphone nothere.json
expect_error 1 'fx.json: format "x" is not a graphone model' transformer-decode good.json --src '1 2' --strategy beam --rescore-graphone fx.json
python3 - <<'PY' || fail "making the damaged models"
import json
def damaged(name, edit):
    m = json.load(open("a.json"))
    edit(m)
    json.dump(m, open(name, "w"))
damaged("count0.json", lambda m: m["counts"]["1"][0].__setitem__(-1, 0))
damaged("id999.json", lambda m: m["counts"]["2"][0].__setitem__(0, 999))
damaged("order9.json", lambda m: m["config"].__setitem__("order", "9"))
damaged("order2.json", lambda m: m["config"].__setitem__("order", "2"))
damaged("token99.json", lambda m: m["graphones"][0].__setitem__(0, 99))
damaged("discount.json", lambda m: m["config"].__setitem__("discount", "1.5"))
damaged("repeat.json", lambda m: m["counts"]["2"].append(m["counts"]["2"][0]))
damaged("version.json", lambda m: m.__setitem__("version", "2"))
PY
rows=$(python3 -c 'import json; print(len(json.load(open("a.json"))["graphones"]))')
for c in "count0.json|count0.json: counts/1[0, 1] is 0, not an integer in [1, " \
         "id999.json|id999.json: counts/2[0, 0] is 999, not an integer in [0, $rows]" \
         'order9.json|order9.json: config: "order" is 9, expected 1 to 8' \
         "order2.json|order2.json: counts of 3 orders for order 2" \
         "token99.json|token99.json: graphones[0, 0] is 99, not an integer in [-1, " \
         "discount.json|discount.json: discount 1.5 is outside (0, 1)" \
         "repeat.json|repeat.json: order 2, n-gram" \
         "version.json|version.json: version 2 of the graphone format"; do
  expect_error 1 "${c#*|}" seq2seq-eval good.json rt.tsv --strategy beam --rescore-graphone "${c%%|*}"
done
expect_error 1 'count0.json: counts/1[0, 1] is 0' transformer-decode good.json --src '1 2' --strategy beam --rescore-graphone count0.json
head -c 300 a.json > cut.json
expect_error 1 "cut.json:1:" seq2seq-eval good.json rt.tsv --strategy beam --rescore-graphone cut.json
head -c 200 a.safetensors > cut.safetensors
expect_error 1 "cut.safetensors: truncated" seq2seq-eval good.json rt.tsv --strategy beam --rescore-graphone cut.safetensors

# --- a graphone model split otherwise than the checkpoint: refused, naming both
graphone-train --train rt.tsv --tokenizer space --save space.json > /dev/null || fail "--tokenizer space exited $?"
expect_error 1 "--rescore-graphone space.json: its tokenizers (space, space) are not good.json's (ids, ids)" \
  seq2seq-eval good.json rt.tsv --strategy beam --rescore-graphone space.json
graphone-train --train rt.tsv --tokenizer ids --target-tokenizer char --save idschar.json > /dev/null 2>&1 ||
  fail "--target-tokenizer char exited $?"
expect_error 1 "its tokenizers (ids, char) are not good.json's (ids, ids)" \
  transformer-decode good.json --src '1 2' --strategy beam --rescore-graphone idschar.json
finish graphone_train
