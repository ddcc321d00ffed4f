// A Transformer language model with learned positions decoding past its context: each prediction reads the last P
// tokens at positions 0 .. P-1 (nanoGPT's generate crops its input the same way). The cached and the uncached
// decoding agree there bit for bit, and each equals the model's own forward over the window's last row.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/models/transformer_lm.hpp"
#include "attnkit/ops/softmax.hpp"
#include "attnkit/tensor/random.hpp"

using namespace attnkit;

TEST_CASE("transformer-lm decoding past its learned positions reads the last P tokens") {
  models::TransformerLMConfig c;
  c.vocab = 11, c.layers = 2, c.heads = 2, c.d_model = 16, c.ff = 32, c.max_positions = 6;
  Rng rng(21);
  models::TransformerLM lm(c, rng);
  models::SourceBatch prompt;
  prompt.N = 1, prompt.S = 4, prompt.src = {4, 7, 5, 9}, prompt.src_lengths = {4};
  auto cached = lm.start_decoding(prompt, true), plain = lm.start_decoding(prompt, false);
  std::vector<int64_t> seq = prompt.src;
  const std::vector<int64_t> feed = {0, 6, 8, 4, 10, 5, 7, 6, 9, 4};  // the first stands for the prompt (<bos>)
  for (size_t i = 0; i < feed.size(); ++i) {
    CAPTURE(i);
    if (i > 0) seq.push_back(feed[i]);
    const Tensor a = cached->step({feed[i]}), b = plain->step({feed[i]});  // [1, V]
    const int64_t t = static_cast<int64_t>(seq.size());
    if (t > c.max_positions)
      for (int64_t v = 0; v < c.vocab; ++v) CHECK(a[v] == b[v]);  // the same window, the same computation
    // the model's forward over the last min(t, P) tokens, its last row
    const int64_t w = std::min<int64_t>(t, c.max_positions);
    models::TeacherForcedBatch batch;
    batch.N = 1, batch.T = w;
    batch.tgt_in.assign(seq.end() - w, seq.end());
    batch.tgt_out = batch.tgt_in;
    batch.tgt_lengths = {w};
    batch.index = {0};
    autograd::NoGrad no_grad;
    const Tensor logits = lm.forward(batch).logits.value();  // [1, w, V]
    Tensor last({1, c.vocab});
    std::copy_n(logits.data() + (w - 1) * c.vocab, c.vocab, last.data());
    const Tensor want = ops::log_softmax_forward(last);
    for (int64_t v = 0; v < c.vocab; ++v) CHECK(std::fabs(a[v] - want[v]) < 2e-5f);
  }
}
