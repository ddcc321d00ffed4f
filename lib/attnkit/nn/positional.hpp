// Positional encodings added to token embeddings (the Transformer's "Positional Encoding"):
// Legend: N batch, T length, E model size (d), P positions (the learned table's size).
//
//   sinusoidal:  PE(pos, 2i) = sin(pos / 10000^(2i/E)),  PE(pos, 2i+1) = cos(pos / 10000^(2i/E))
//                (no parameters; computed in double, rounded to float; any length)
//   learned:     PE(pos) = weight[pos], weight [P, E] ~ N(0, 1) (an nn.Embedding of positions)
//
//   forward(x [N, T, E], offset) = x + PE[offset .. offset + T)          [N, T, E]
//
// The embedding scale sqrt(E) and the dropout that follow the sum in the paper are the model's
// (models/transformer.hpp): embed_positions() below does the three in the paper's order.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/nn/parameter.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::nn {

// [T, E]: rows offset .. offset + T - 1 of the sinusoidal table (E may be odd: the last column is a sine).
Tensor sinusoidal_table(int64_t T, int64_t E, int64_t offset = 0);

enum class PositionalKind { Sinusoidal, Learned };
PositionalKind parse_positional_kind(std::string_view name);  // "sinusoidal", "learned"
std::string_view positional_kind_name(PositionalKind kind);

class PositionalEncoding : public Module {
 public:
  // max_positions: the learned table's size P (unused by the sinusoidal kind, which has no limit).
  // prefix names the learned table's parameter ("<prefix>.weight"). The learned table: N(0, 1) from `rng`,
  // or zeros without one (to be filled by load_state_dict, nn/state_dict.hpp).
  PositionalEncoding(PositionalKind kind, int64_t embed, int64_t max_positions, const std::string& prefix = "pos_embed");
  PositionalEncoding(PositionalKind kind, int64_t embed, int64_t max_positions, Rng& rng,
                     const std::string& prefix = "pos_embed");

  PositionalKind kind() const { return kind_; }
  int64_t embed() const { return embed_; }
  int64_t max_positions() const { return max_positions_; }

  Parameter weight;  // learned: [P, E]; sinusoidal: empty

  // x [N, T, E] or [T, E] -> x + PE[offset .. offset + T); recorded unless under NoGrad (the learned
  // table gets the gradient). Throws when T or offset + T exceed a learned table, or E disagrees.
  autograd::Var forward(const autograd::Var& x, int64_t offset = 0);
  // The encoding rows [T, E] themselves (a copy).
  Tensor rows(int64_t T, int64_t offset = 0) const;

  std::vector<Parameter*> named_parameters() override;
  using Module::named_parameters;

 private:
  PositionalKind kind_;
  int64_t embed_, max_positions_;
  int64_t cached_rows() const { return cache_.empty() ? 0 : cache_.dim(0); }
  Tensor cache_;  // sinusoidal rows 0 .. cache_.dim(0) - 1, grown on demand
};

}  // namespace attnkit::nn
