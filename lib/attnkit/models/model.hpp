// What seq2seq-train trains and transformer-decode decodes: a translation model mapping a batch of source
// token ids to next-token distributions over the target vocabulary. Implemented by the recurrent
// encoder-decoder (models/seq2seq.hpp) and the Transformer.
// Legend: N batch, S source length, T target length (+1 for <bos>/<eos>), Vt target vocabulary.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/value.hpp"
#include "attnkit/models/decoding.hpp"
#include "attnkit/nn/parameter.hpp"
#include "attnkit/nn/precision.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/models/inputs.hpp"

namespace attnkit::models {

// How forward() runs: training-time randomness and the loss. Defaults: evaluation (no dropout, full teacher
// forcing); either randomness needs `rng`, from which the dropout masks and the sampling draws come, in a
// fixed order (so a run that restores the Rng's state repeats them exactly). A model refuses an option it
// does not support (an error naming it), rather than ignoring it.
struct ForwardOptions {
  float label_smoothing = 0.0f;
  float dropout = 0.0f;          // p in [0, 1)
  float teacher_forcing = 1.0f;  // r in [0, 1]: probability of feeding the reference token (per row and step)
  Rng* rng = nullptr;
};
using LossOptions = ForwardOptions;

struct ForwardResult {
  autograd::Var loss;    // scalar: mean over the target tokens that are not <pad>
  autograd::Var logits;  // [N, T, Vt]
};

// Decodable (models/decoding.hpp): has_source() and start_decoding(), the incremental decoding a search drives.
class TranslationModel : public nn::Module, public Decodable {
 public:
  // The checkpoint's model family: "recurrent" or "transformer".
  virtual std::string_view family() const = 0;
  // The model's configuration as stored in a checkpoint's "config" member.
  virtual io::Value config_value() const = 0;

  // Forward over a teacher-forced batch (models/inputs.hpp) and its loss; recorded unless under autograd::NoGrad.
  virtual ForwardResult forward(const TeacherForcedBatch& batch, const ForwardOptions& options = {}) = 0;
  // Greedy decoding of the batch's sources: each row's ids without <bos>/<eos>, at most max_len of them.
  virtual std::vector<std::vector<int64_t>> greedy(const SourceBatch& batch, int64_t max_len) = 0;
  // Parameters as sub-bundles named by the first part of their state_dict names, and the inverse (every
  // parameter found by name and shape-checked before any is changed; `what` names the bundle in messages).
  virtual io::Value parameters_value() const = 0;
  virtual void load_parameters(const io::Value& bundle, std::string_view what) = 0;

  // Inference in lower precision (nn/precision.hpp): every weight matrix the decoding multiplies by, in the
  // plan's precision for its name (the plan counts them). A model without a lower-precision path refuses any
  // precision but float32, naming its family. Training a model with lower-precision weights is refused.
  virtual void set_precision(nn::PrecisionPlan& plan);
};

}  // namespace attnkit::models
