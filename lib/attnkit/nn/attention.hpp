// nn::MultiheadAttention, the module of multi-head attention: its parameters in PyTorch's or the documents'
// naming, loading from a bundle, the checks, and the view its kernels read (ops/mha.hpp holds the kernels,
// their options, results and cache; autograd/multihead.hpp the recorded op).
//
// Legend: N batch, T queries, S keys, E model size (query/key projection size), Ev value projection
// size, Eo output size, NH heads, Dq/Dk/Dv input sizes of query, key, value.
//
// Parameters (nn::Module; named_parameters() in PyTorch state_dict order, [out, in] layout):
//   in_proj_weight [3E, E] (rows q, k, v), in_proj_bias [3E]                        (kdim == vdim == E)
//   q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim], in_proj_bias [3E]
//   out_proj.weight [E, E], out_proj.bias [E]          (biases optional; out_proj.weight also nested)
// or the documents' form under its own names (x W, [in, out]): W_Q [Dq, E], W_K [Dk, E], W_V [Dk, Ev],
// optional W_O [Ev, Eo]; with NH = 1 and no W_O this is the documents' single self-attention
// Q = X W_Q, K = X W_K, V = X W_V.
//
#pragma once
#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/value.hpp"
#include "attnkit/nn/parameter.hpp"
#include "attnkit/nn/precision.hpp"
#include "attnkit/ops/mha.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::nn {

enum class MhaWeightForm { InProj, SeparateProj, Documents };

class MultiheadAttention : public Module {
 public:
  int64_t num_heads = 1;
  MhaWeightForm form = MhaWeightForm::InProj;
  // PyTorch forms (only the form's own are non-empty).
  Parameter in_proj_weight{"in_proj_weight", {}}, q_proj_weight{"q_proj_weight", {}},
      k_proj_weight{"k_proj_weight", {}}, v_proj_weight{"v_proj_weight", {}}, in_proj_bias{"in_proj_bias", {}},
      out_proj_weight{"out_proj.weight", {}}, out_proj_bias{"out_proj.bias", {}};
  // The documents' form.
  Parameter W_Q{"W_Q", {}}, W_K{"W_K", {}}, W_V{"W_V", {}}, W_O{"W_O", {}};

  // No parameters (fill them by hand, then check()), or from_bundle.
  MultiheadAttention() = default;
  // PyTorch's nn.MultiheadAttention(E, NH) (kdim = vdim = E, biases): the in_proj form with its parameters
  // named "<prefix>in_proj_weight", ... (prefix as given: "self_attn."), all zeros, to be filled by
  // load_state_dict (nn/state_dict.hpp); or initialised from `rng` (reset_parameters).
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, const std::string& prefix = "");
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, Rng& rng, const std::string& prefix = "");

  // As PyTorch's: in_proj_weight xavier_uniform, then out_proj.weight U(+-1/sqrt(E)), the biases zero
  // (the in_proj form only).
  void reset_parameters(Rng& rng);

  // From a bundle in either naming (see above), each tensor named `prefix` + its name ("decoder.layers.0.
  // multihead_attn." + "in_proj_weight"; the prefix as given); every tensor's presence and shape is checked
  // (io::find_tensor), and a tensor under the prefix that is none of the form's is refused (with an empty
  // prefix: any other tensor of the bundle). `op` prefixes messages. Throws attnkit::Error naming the
  // weight, its shape and the expected one, or if NH does not divide E.
  static MultiheadAttention from_bundle(const io::Value& bundle, int64_t num_heads,
                                        std::string_view op = "multi-head attention", const std::string& prefix = "");

  // The non-empty parameters in state_dict order (in_proj_weight | q/k/v_proj_weight, in_proj_bias,
  // out_proj.weight, out_proj.bias; or W_Q, W_K, W_V, W_O).
  std::vector<Parameter*> named_parameters() override;
  using Module::named_parameters;

  // Inference in lower precision: each weight matrix (in_proj_weight [3E, E] as one, or q/k/v_proj_weight,
  // out_proj.weight; the documents' W_Q .. W_O) in the plan's precision for its name, made now from the current
  // values (a value the precision cannot hold is refused here) and remade after they change. The projections
  // then carry the copy of their own rows (ops::Projection::lowp: in_proj_weight's per output channel int8 or
  // bfloat16 rows are the same cut in three), no packed float32 weights are made, and a recorded forward is
  // refused. A float32 plan restores the float32 products.
  void set_precision(PrecisionPlan& plan);

  // The views the kernels read (out_projection() is empty when there is none).
  ops::Projection q_projection() const;
  ops::Projection k_projection() const;
  ops::Projection v_projection() const;
  ops::Projection out_projection() const;
  int64_t embed_dim() const { return q_projection().out; }  // E
  int64_t value_dim() const { return v_projection().out; }  // Ev
  int64_t output_dim() const { return out_projection().empty() ? value_dim() : out_projection().out; }  // Eo

  // Throws unless the parameters agree with each other and NH >= 1 divides E and Ev (every
  // forward and backward calls it first: a struct filled by hand is checked like a loaded one).
  void check(std::string_view op = "multi-head attention") const;

  // What the kernels read (ops::MhaWeights): the projections, NH, the projections' weights packed for the
  // product kernel (derived from the parameters and rebuilt after one changes, its version:
  // docs/architecture.md; self-attention packs Q | K | V as one product when the weights are one matrix,
  // in_proj_weight) and where the parameter gradients go among named_parameters(). Call check() first; the
  // view reads the parameters in place: the module must outlive its use and not move.
  ops::MhaWeights view() const;

  // y = MHA(query, key, value) [.., T, Eo], recorded (autograd::multihead_attention): the parameters'
  // gradients accumulate into each Parameter's grad. Averaged or per-head weights (options.weights) go to
  // *weights when given. The module must outlive the backward pass.
  autograd::Var forward(const autograd::Var& query, const autograd::Var& key, const autograd::Var& value,
                        const ops::MhaOptions& options = {}, Tensor* weights = nullptr);

 private:
  std::shared_ptr<const ops::MhaPackedWeights> packed_weights(bool self_attention) const;
  DerivedSlot<ops::MhaPackedWeights> packed_joined_, packed_apart_;
  // Projection `part` (0 q, 1 k, 2 v, 3 out) in lowp_precision_[part], or null (float32).
  std::shared_ptr<const ops::LowpWeights> lowp(int part) const;
  std::array<ops::Precision, 4> lowp_precision_{ops::Precision::Fp32, ops::Precision::Fp32, ops::Precision::Fp32,
                                                ops::Precision::Fp32};
  std::array<DerivedSlot<ops::LowpWeights>, 4> lowp_;
};

// The kernels of ops/mha.hpp on the module's weights, each checking the module first (`m.check`).
ops::MhaResult multihead_attention_forward(const MultiheadAttention& m, const Tensor& query, const Tensor& key,
                                           const Tensor& value, const ops::MhaOptions& options,
                                           ops::MhaCache* cache = nullptr);
ops::MhaResult multihead_attention_forward_ops(const MultiheadAttention& m, const Tensor& query, const Tensor& key,
                                               const Tensor& value, const ops::MhaOptions& options);
ops::MhaResult multihead_attention_forward_naive(const MultiheadAttention& m, const Tensor& query, const Tensor& key,
                                                 const Tensor& value, const ops::MhaOptions& options);
ops::MhaResult multihead_attention_forward_projected(const MultiheadAttention& m, const Tensor& query, const Tensor& K,
                                                     const Tensor& V, const ops::MhaOptions& options,
                                                     int64_t kv_rows = -1);
// ops::multihead_attention_backward into the parameter gradients: dparams[i] for named_parameters()[i] (null
// skips one), or, with dparams empty, into each parameter's grad_buffer().
void multihead_attention_backward(MultiheadAttention& m, const Tensor& query, const Tensor& key, const Tensor& value,
                                  const ops::MhaOptions& options, const ops::MhaCache& cache, const Tensor& doutput,
                                  Tensor* dquery, Tensor* dkey, Tensor* dvalue,
                                  const std::vector<Tensor*>& dparams = {});

}  // namespace attnkit::nn
