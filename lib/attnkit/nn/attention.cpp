// Legend: E model size, Ev value projection size, Eo output size, NH heads.
#include "attnkit/nn/attention.hpp"

#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "attnkit/autograd/multihead.hpp"
#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/weight_checks.hpp"
#include "attnkit/nn/init.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {

namespace {

// Rows r0 .. r0 + rows of a PyTorch weight [out, in], bias from b0 in b (may be empty).
ops::Projection pytorch_rows(const Parameter& w, int64_t r0, int64_t rows, const Parameter& b, int64_t b0) {
  ops::Projection p;
  p.W = w.value.data() + r0 * w.value.dim(1);
  p.out = rows;
  p.in = w.value.dim(1);
  p.b = b.value.empty() ? nullptr : b.value.data() + b0;
  return p;
}

ops::Projection documents(const Parameter& w) {
  ops::Projection p;
  p.W = w.value.data();
  p.in = w.value.dim(0);
  p.out = w.value.dim(1);
  p.in_out = true;
  return p;
}

void expect_shape(const Tensor& t, const std::string& name, const Shape& expected, const std::string& legend,
                  std::string_view op) {
  AK_CHECK(t.shape() == expected, "{}: {} has shape {}, expected {} = {}", op, name, t.shape_str(), legend,
           shape_str(expected));
}

}  // namespace

// ---- the module ----

std::vector<Parameter*> MultiheadAttention::named_parameters() {
  std::vector<Parameter*> out;
  auto add = [&](Parameter& p) {
    if (!p.value.empty()) out.push_back(&p);
  };
  switch (form) {
    case MhaWeightForm::InProj: add(in_proj_weight); break;
    case MhaWeightForm::SeparateProj: add(q_proj_weight), add(k_proj_weight), add(v_proj_weight); break;
    case MhaWeightForm::Documents: add(W_Q), add(W_K), add(W_V), add(W_O); return out;
  }
  add(in_proj_bias), add(out_proj_weight), add(out_proj_bias);
  return out;
}

ops::Projection MultiheadAttention::q_projection() const {
  ops::Projection p;
  switch (form) {
    case MhaWeightForm::InProj: p = pytorch_rows(in_proj_weight, 0, in_proj_weight.value.dim(1), in_proj_bias, 0); break;
    case MhaWeightForm::SeparateProj: p = pytorch_rows(q_proj_weight, 0, q_proj_weight.value.dim(0), in_proj_bias, 0); break;
    case MhaWeightForm::Documents: p = documents(W_Q); break;
  }
  p.lowp = lowp(0);
  return p;
}

ops::Projection MultiheadAttention::k_projection() const {
  ops::Projection p;
  switch (form) {
    case MhaWeightForm::InProj: {
      const int64_t E = in_proj_weight.value.dim(1);
      p = pytorch_rows(in_proj_weight, E, E, in_proj_bias, E);
      break;
    }
    case MhaWeightForm::SeparateProj: {
      const int64_t E = k_proj_weight.value.dim(0);
      p = pytorch_rows(k_proj_weight, 0, E, in_proj_bias, E);
      break;
    }
    case MhaWeightForm::Documents: p = documents(W_K); break;
  }
  p.lowp = lowp(1);
  return p;
}

ops::Projection MultiheadAttention::v_projection() const {
  ops::Projection p;
  switch (form) {
    case MhaWeightForm::InProj: {
      const int64_t E = in_proj_weight.value.dim(1);
      p = pytorch_rows(in_proj_weight, 2 * E, E, in_proj_bias, 2 * E);
      break;
    }
    case MhaWeightForm::SeparateProj: {
      const int64_t E = v_proj_weight.value.dim(0);
      p = pytorch_rows(v_proj_weight, 0, E, in_proj_bias, 2 * E);
      break;
    }
    case MhaWeightForm::Documents: p = documents(W_V); break;
  }
  p.lowp = lowp(2);
  return p;
}

ops::Projection MultiheadAttention::out_projection() const {
  ops::Projection p;
  if (form == MhaWeightForm::Documents) {
    if (W_O.value.empty()) return p;
    p = documents(W_O);
  } else {
    if (out_proj_weight.value.empty()) return p;
    p = pytorch_rows(out_proj_weight, 0, out_proj_weight.value.dim(0), out_proj_bias, 0);
  }
  p.lowp = lowp(3);
  return p;
}

namespace {

// The parameter holding m's projection `part` (0 q, 1 k, 2 v, 3 out), and the first of its rows there
// (in_proj_weight holds q, k, v).
const Parameter& part_weight(const MultiheadAttention& m, int part, int64_t& row0) {
  row0 = 0;
  if (part == 3) return m.form == MhaWeightForm::Documents ? m.W_O : m.out_proj_weight;
  switch (m.form) {
    case MhaWeightForm::InProj: row0 = part * m.in_proj_weight.value.dim(1); return m.in_proj_weight;
    case MhaWeightForm::SeparateProj: return part == 0 ? m.q_proj_weight : part == 1 ? m.k_proj_weight : m.v_proj_weight;
    case MhaWeightForm::Documents: break;
  }
  return part == 0 ? m.W_Q : part == 1 ? m.W_K : m.W_V;
}

}  // namespace

std::shared_ptr<const ops::LowpWeights> MultiheadAttention::lowp(int part) const {
  const ops::Precision precision = lowp_precision_[size_t(part)];
  if (precision == ops::Precision::Fp32) return nullptr;
  int64_t row0 = 0;
  const Parameter& w = part_weight(*this, part, row0);
  return lowp_[size_t(part)].get({&w}, [&] {
    if (form != MhaWeightForm::Documents) {  // rows row0 .. row0 + E of [out, in]
      const int64_t in = w.value.dim(1), out = part < 3 && form == MhaWeightForm::InProj ? in : w.value.dim(0);
      return ops::make_lowp_weights(w.value.data() + row0 * in, out, in, precision, w.name);
    }
    const int64_t in = w.value.dim(0), out = w.value.dim(1);  // W [in, out]: the copy is of W^T [out, in]
    std::vector<float> t(size_t(out * in));
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o) t[size_t(o * in + i)] = w.value[i * out + o];
    return ops::make_lowp_weights(t.data(), out, in, precision, w.name);
  });
}

void MultiheadAttention::set_precision(PrecisionPlan& plan) {
  check("multi-head attention");
  for (int part = 0; part < 4; ++part) {
    int64_t row0 = 0;
    const Parameter& w = part_weight(*this, part, row0);
    ops::Precision& p = lowp_precision_[size_t(part)];
    if (w.value.empty()) {  // no output projection
      p = ops::Precision::Fp32;
      continue;
    }
    const bool documents = form == MhaWeightForm::Documents;
    if (form == MhaWeightForm::InProj && part > 0 && part < 3)
      p = lowp_precision_[0];  // in_proj_weight: one matrix, asked about once
    else
      p = plan.for_weight(w.name, w.value.dim(documents ? 1 : 0), w.value.dim(documents ? 0 : 1));
    lowp_[size_t(part)] = DerivedSlot<ops::LowpWeights>();
    const ops::LowpWeights* s =
        plan.stored(w.name, p, w.value.dim(documents ? 1 : 0), w.value.dim(documents ? 0 : 1));
    if (s == nullptr) continue;
    if (form == MhaWeightForm::InProj && part < 3) {  // the part's rows row0 .. row0 + E of the stored [3E, E]
      std::vector<int64_t> rows(size_t(w.value.dim(1)));
      for (size_t r = 0; r < rows.size(); ++r) rows[r] = row0 + int64_t(r);
      lowp_[size_t(part)].get({&w}, [&] { return ops::lowp_rows(*s, rows); });
    } else {
      lowp_[size_t(part)].get({&w}, [&] { return *s; });
    }
  }
  for (int part = 0; part < 4; ++part) lowp(part);  // made now: a weight the precision cannot hold is refused here
}

void MultiheadAttention::check(std::string_view op) const {
  AK_CHECK(num_heads >= 1, "{}: the number of heads must be at least 1, not {}", op, num_heads);
  int64_t E = 0, Ev = 0;
  switch (form) {
    case MhaWeightForm::InProj: {
      const Tensor& w = in_proj_weight.value;
      AK_CHECK(w.rank() == 2 && w.dim(0) == 3 * w.dim(1),
               "{}: in_proj_weight has shape {}, expected [3E, E] (rows: q, k, v projections)", op, w.shape_str());
      E = Ev = w.dim(1);
      break;
    }
    case MhaWeightForm::SeparateProj: {
      const Tensor &wq = q_proj_weight.value, &wk = k_proj_weight.value, &wv = v_proj_weight.value;
      AK_CHECK(wq.rank() == 2 && wq.dim(0) == wq.dim(1), "{}: q_proj_weight has shape {}, expected [E, E]", op,
               wq.shape_str());
      E = Ev = wq.dim(0);
      AK_CHECK(wk.rank() == 2 && wk.dim(0) == E, "{}: k_proj_weight has shape {}, expected [E, kdim] with E = {}", op,
               wk.shape_str(), E);
      AK_CHECK(wv.rank() == 2 && wv.dim(0) == E, "{}: v_proj_weight has shape {}, expected [E, vdim] with E = {}", op,
               wv.shape_str(), E);
      break;
    }
    case MhaWeightForm::Documents: {
      const Tensor &wq = W_Q.value, &wk = W_K.value, &wv = W_V.value, &wo = W_O.value;
      AK_CHECK(wq.rank() == 2, "{}: W_Q has shape {}, expected [Dq, E]", op, wq.shape_str());
      E = wq.dim(1);
      AK_CHECK(wk.rank() == 2 && wk.dim(1) == E, "{}: W_K has shape {}, expected [Dk, E] with E = {} (from W_Q {})", op,
               wk.shape_str(), E, wq.shape_str());
      AK_CHECK(wv.rank() == 2 && wv.dim(0) == wk.dim(0),
               "{}: W_V has shape {}, expected [Dk, Ev] with Dk = {} (from W_K {})", op, wv.shape_str(), wk.dim(0),
               wk.shape_str());
      Ev = wv.dim(1);
      if (!wo.empty())
        AK_CHECK(wo.rank() == 2 && wo.dim(0) == Ev, "{}: W_O has shape {}, expected [Ev, Eo] with Ev = {}", op,
                 wo.shape_str(), Ev);
      break;
    }
  }
  if (form != MhaWeightForm::Documents) {
    if (!in_proj_bias.value.empty()) expect_shape(in_proj_bias.value, "in_proj_bias", {3 * E}, "[3E]", op);
    AK_CHECK(!out_proj_weight.value.empty(), "{}: out_proj.weight [E, E] = [{}, {}] is missing", op, E, E);
    expect_shape(out_proj_weight.value, "out_proj.weight", {E, E}, "[E, E]", op);
    if (!out_proj_bias.value.empty()) expect_shape(out_proj_bias.value, "out_proj.bias", {E}, "[E]", op);
  }
  AK_CHECK(E % num_heads == 0, "{}: NH = {} heads do not divide the embedding size E = {}", op, num_heads, E);
  AK_CHECK(Ev % num_heads == 0, "{}: NH = {} heads do not divide the value size Ev = {}", op, num_heads, Ev);
}

MultiheadAttention::MultiheadAttention(int64_t E, int64_t heads, const std::string& prefix)
    : num_heads(heads), form(MhaWeightForm::InProj) {
  AK_CHECK(E >= 1, "{}multi-head attention: embedding size E = {} must be >= 1", prefix, E);
  in_proj_weight = Parameter(prefix + "in_proj_weight", Tensor({3 * E, E}));  // [3E, E]
  in_proj_bias = Parameter(prefix + "in_proj_bias", Tensor({3 * E}));          // [3E]
  out_proj_weight = Parameter(prefix + "out_proj.weight", Tensor({E, E}));     // [E, E]
  out_proj_bias = Parameter(prefix + "out_proj.bias", Tensor({E}));            // [E]
  check(prefix.empty() ? "multi-head attention" : prefix);
}

MultiheadAttention::MultiheadAttention(int64_t E, int64_t heads, Rng& rng, const std::string& prefix)
    : MultiheadAttention(E, heads, prefix) {
  reset_parameters(rng);
}

void MultiheadAttention::reset_parameters(Rng& rng) {
  AK_CHECK(form == MhaWeightForm::InProj && !in_proj_bias.value.empty() && !out_proj_bias.value.empty(),
           "multi-head attention: reset_parameters initialises the in_proj form with biases only");
  const int64_t E = embed_dim();
  xavier_uniform(in_proj_weight, rng);  // [3E, E]
  in_proj_bias.value = Tensor({3 * E}), in_proj_bias.touch();
  const float bound = 1.0f / std::sqrt(static_cast<float>(E));
  out_proj_weight.value = rand_uniform({E, E}, rng, -bound, bound), out_proj_weight.touch();
  out_proj_bias.value = Tensor({E}), out_proj_bias.touch();
}

MultiheadAttention MultiheadAttention::from_bundle(const io::Value& bundle, int64_t num_heads, std::string_view op,
                                                   const std::string& prefix) {
  AK_CHECK(bundle.is_bundle(), "{}: the weights are not a bundle of named tensors{}", op,
           bundle.is_tensor() ? "" : ": " + bundle.why());
  AK_CHECK(num_heads >= 1, "{}: the number of heads must be at least 1, not {}", op, num_heads);
  MultiheadAttention m;
  m.num_heads = num_heads;
  std::set<std::string> used;  // every tensor member must be one of these (check_no_extra_weights)
  auto get = [&](const char* name) {
    const Tensor* t = io::find_tensor(bundle, prefix + name, op);
    if (t) used.insert(prefix + name);
    return t;
  };
  for (const char* unsupported : {"bias_k", "bias_v"})
    AK_CHECK(!get(unsupported), "{}: weights member {} (add_bias_kv=True) is not supported", op, unsupported);
  if (const Tensor* w = get("in_proj_weight")) {
    m.form = MhaWeightForm::InProj;
    m.in_proj_weight.value = *w;
  } else if (const Tensor* wq = get("q_proj_weight")) {
    const Tensor* wk = get("k_proj_weight");
    const Tensor* wv = get("v_proj_weight");
    AK_CHECK(wk && wv, "{}: q_proj_weight needs k_proj_weight and v_proj_weight too ({} is missing)", op,
             wk ? "v_proj_weight" : "k_proj_weight");
    m.form = MhaWeightForm::SeparateProj;
    m.q_proj_weight.value = *wq, m.k_proj_weight.value = *wk, m.v_proj_weight.value = *wv;
  } else if (const Tensor* wq = get("W_Q")) {
    const Tensor* wk = get("W_K");
    const Tensor* wv = get("W_V");
    AK_CHECK(wk && wv, "{}: W_Q needs W_K and W_V too ({} is missing)", op, wk ? "W_V" : "W_K");
    m.form = MhaWeightForm::Documents;
    m.W_Q.value = *wq, m.W_K.value = *wk, m.W_V.value = *wv;
    if (const Tensor* wo = get("W_O")) m.W_O.value = *wo;
  } else {
    std::string names;
    for (const auto& n : bundle.names()) names += (names.empty() ? "" : ", ") + n;
    fail("{}: the weights have none of {}in_proj_weight, {}q_proj_weight or {}W_Q (members: {})", op, prefix, prefix,
         prefix, names.empty() ? "none" : names);
  }
  if (m.form != MhaWeightForm::Documents) {
    if (const Tensor* b = get("in_proj_bias")) m.in_proj_bias.value = *b;
    if (const Tensor* w = get("out_proj.weight")) m.out_proj_weight.value = *w;
    if (const Tensor* b = get("out_proj.bias")) m.out_proj_bias.value = *b;
  }
  m.check(op);
  io::check_no_extra_weights(bundle, used, op, prefix);
  return m;
}

std::shared_ptr<const ops::MhaPackedWeights> MultiheadAttention::packed_weights(bool self_attention) const {
  const ops::Projection q = q_projection(), k = k_projection(), v = v_projection();
  const bool joined = self_attention && ops::joined_projection(q, k, v).has_value();
  return (joined ? packed_joined_ : packed_apart_).get(named_parameters(), [&] {
    return ops::pack_mha_weights(q, k, v, out_projection(), self_attention);
  });
}

ops::MhaWeights MultiheadAttention::view() const {
  ops::MhaWeights w;
  w.q = q_projection(), w.k = k_projection(), w.v = v_projection(), w.out = out_projection();
  w.num_heads = num_heads;
  if (!w.lowp()) w.packed = [this](bool self_attention) { return packed_weights(self_attention); };
  const std::vector<const Parameter*> params = named_parameters();
  auto slot = [&](const Parameter& p, int64_t offset = 0) {
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i] == &p) return ops::MhaGradSlots::Slot{static_cast<int>(i), offset};
    return ops::MhaGradSlots::Slot{};  // absent (an optional bias)
  };
  ops::MhaGradSlots& g = w.grads;
  const int64_t E = w.embed_dim();
  if (form == MhaWeightForm::Documents) {
    g.Wq = slot(W_Q), g.Wk = slot(W_K), g.Wv = slot(W_V), g.Wo = slot(W_O);
    return w;
  }
  if (form == MhaWeightForm::InProj)  // [3E, E]: rows q, k, v
    g.Wq = slot(in_proj_weight), g.Wk = slot(in_proj_weight, E * E), g.Wv = slot(in_proj_weight, 2 * E * E);
  else
    g.Wq = slot(q_proj_weight), g.Wk = slot(k_proj_weight), g.Wv = slot(v_proj_weight);
  g.bq = slot(in_proj_bias), g.bk = slot(in_proj_bias, E), g.bv = slot(in_proj_bias, 2 * E);  // [3E]
  g.Wo = slot(out_proj_weight), g.bo = slot(out_proj_bias);
  return w;
}

autograd::Var MultiheadAttention::forward(const autograd::Var& query, const autograd::Var& key,
                                          const autograd::Var& value, const ops::MhaOptions& options,
                                          Tensor* weights) {
  check("multi-head attention");
  return autograd::multihead_attention(view(), named_parameters(), query, key, value, options, weights);
}

// ---- the kernels on the module ----

ops::MhaResult multihead_attention_forward(const MultiheadAttention& m, const Tensor& query, const Tensor& key,
                                           const Tensor& value, const ops::MhaOptions& options, ops::MhaCache* cache) {
  m.check("multi-head attention");
  return ops::multihead_attention_forward(m.view(), query, key, value, options, cache);
}

ops::MhaResult multihead_attention_forward_ops(const MultiheadAttention& m, const Tensor& query, const Tensor& key,
                                               const Tensor& value, const ops::MhaOptions& options) {
  m.check("multi-head attention");
  return ops::multihead_attention_forward_ops(m.view(), query, key, value, options);
}

ops::MhaResult multihead_attention_forward_naive(const MultiheadAttention& m, const Tensor& query, const Tensor& key,
                                                 const Tensor& value, const ops::MhaOptions& options) {
  m.check("multi-head attention");
  return ops::multihead_attention_forward_naive(m.view(), query, key, value, options);
}

ops::MhaResult multihead_attention_forward_projected(const MultiheadAttention& m, const Tensor& query, const Tensor& K,
                                                     const Tensor& V, const ops::MhaOptions& options, int64_t kv_rows) {
  m.check("multi-head attention");
  return ops::multihead_attention_forward_projected(m.view(), query, K, V, options, kv_rows);
}

void multihead_attention_backward(MultiheadAttention& m, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const ops::MhaOptions& o, const ops::MhaCache& cache, const Tensor& dY, Tensor* dq,
                                  Tensor* dk, Tensor* dv, const std::vector<Tensor*>& dparams) {
  constexpr std::string_view op = "multi-head attention backward";
  m.check(op);
  // Where each parameter's gradient goes.
  const std::vector<Parameter*> params = m.named_parameters();
  AK_CHECK(dparams.empty() || dparams.size() == params.size(), "{}: {} parameter gradients given for {} parameters", op,
           dparams.size(), params.size());
  std::vector<Tensor*> grads(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    Parameter& p = *params[i];
    Tensor* g = dparams.empty() ? &p.grad_buffer() : dparams[i];
    if (g)
      AK_CHECK(g->shape() == p.value.shape(), "{}: the gradient of {} has shape {}, expected {}", op, p.name,
               g->shape_str(), p.value.shape_str());
    grads[i] = g;
  }
  const ops::MhaWeights w = m.view();
  ops::multihead_attention_backward(w, q, k, v, o, cache, dY, dq, dk, dv, w.grads.in(grads));
}

}  // namespace attnkit::nn
