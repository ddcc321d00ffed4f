// The number of parameters a model of a config has, computed from its sizes without building it (in double,
// so that no product of sizes overflows): what a tool checks before it allocates a model (seq2seq-train
// refuses one whose training state would pass its memory limit). Exact: equal to the sum of the sizes of the
// built model's named_parameters() (tests/unit/test_size_estimate.cpp).
#pragma once
#include "attnkit/models/recurrent_lm.hpp"
#include "attnkit/models/seq2seq.hpp"
#include "attnkit/models/transformer.hpp"
#include "attnkit/models/transformer_lm.hpp"

namespace attnkit::models {

double parameter_count(const Seq2SeqConfig& config);
double parameter_count(const TransformerConfig& config);
double parameter_count(const TransformerLMConfig& config);
double parameter_count(const RecurrentLMConfig& config);

}  // namespace attnkit::models
