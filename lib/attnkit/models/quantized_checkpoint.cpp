#include "attnkit/models/quantized_checkpoint.hpp"

#include <cmath>

#include "attnkit/io/record_reader.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/fields.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::models {

namespace {

constexpr const char* kSection = "quantized";

// A parameter's place in a document (add_quantized_parameters).
std::vector<std::string> place(const std::string& name, const std::string& what) {
  const size_t dot = name.find('.');
  AK_CHECK(!name.empty() && dot != 0 && (dot == std::string::npos || dot + 1 < name.size()),
           "{}: quantized weight \"{}\" is not a parameter name", what, name);
  if (dot == std::string::npos) return {name};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

const Tensor* find_placed(const io::Value& checkpoint, const std::vector<std::string>& path) {
  const io::Value* t = checkpoint.find(path[0]);
  if (path.size() == 2) t = t && t->is_bundle() ? t->find(path[1]) : nullptr;
  return t && t->is_tensor() ? &t->tensor() : nullptr;
}

}  // namespace

std::map<std::string, std::string> add_quantized_parameters(io::Value& checkpoint, const nn::Module& model,
                                                            const nn::PrecisionPlan& plan) {
  AK_CHECK(plan.precision() != ops::Precision::Fp32, "a quantized checkpoint needs a precision below fp32");
  std::map<std::string, const nn::PrecisionPlan::Decision*> lowered;
  for (const nn::PrecisionPlan::Decision& d : plan.decisions())
    if (d.precision != ops::Precision::Fp32) lowered[d.name] = &d;
  const bool int8 = plan.precision() == ops::Precision::Int8;
  std::map<std::string, std::string> dtypes;
  io::Value weights, scales;
  int64_t matrices = 0;
  for (const Parameter* p : model.named_parameters()) {
    const auto it = lowered.find(p->name);
    if (it == lowered.end() || it->second->float_too) checkpoint.set_path(place(p->name, "model"), p->value);
    if (it == lowered.end()) continue;
    const nn::PrecisionPlan::Decision& d = *it->second;
    const Tensor& w = p->value;
    AK_CHECK(w.rank() == 2 && w.dim(0) == d.out && w.dim(1) == d.in,
             "{}: held as [{}, {}] of its {} values: a quantized checkpoint stores a weight matrix in its own layout",
             p->name, d.out, d.in, w.shape_str());
    const ops::LowpWeights* stored = plan.stored(p->name, d.precision, d.out, d.in);
    const ops::LowpWeights made =
        stored ? ops::LowpWeights{} : ops::make_lowp_weights(w.data(), d.out, d.in, d.precision, p->name);
    const ops::LowpWeights& l = stored ? *stored : made;
    Tensor values({d.out, d.in});  // the stored elements, each exactly a float32
    for (int64_t i = 0; i < d.out * d.in; ++i)
      values[i] = int8 ? float(l.q8.q[size_t(i)]) : ops::from_bf16(l.bf16.w[size_t(i)]);
    weights.set(p->name, std::move(values));
    dtypes[std::string(kSection) + ".weights." + p->name] = int8 ? "I8" : "BF16";
    if (int8) scales.set(p->name, Tensor({d.out}, l.q8.scale));
    ++matrices;
  }
  io::Value section;
  section.set("precision", text_value(ops::precision_name(plan.precision())));
  section.set("matrices", text_value(std::to_string(matrices)));
  section.set("weights", std::move(weights));
  if (int8) section.set("scales", std::move(scales));
  checkpoint.set(kSection, std::move(section));
  return dtypes;
}

std::optional<StoredWeights> take_quantized(io::Value& checkpoint, const std::map<std::string, std::string>* dtypes,
                                            const std::string& what) {
  const io::Value* q = checkpoint.is_bundle() ? checkpoint.find(kSection) : nullptr;
  if (q == nullptr) return std::nullopt;
  AK_CHECK(dtypes != nullptr, "{}: a quantized checkpoint (its \"{}\" section) is read from .safetensors only, "
           "where its int8 and bfloat16 elements are stored as such", what, kSection);
  const std::string at = what + ": " + kSection;
  const Fields f(*q, at);
  StoredWeights out;
  out.precision = f.choice("precision", ops::precision_from_name);
  AK_CHECK(out.precision != ops::Precision::Fp32, "{}: precision fp32 (a quantized checkpoint is int8 or bf16)", at);
  const bool int8 = out.precision == ops::Precision::Int8;
  const std::string want = int8 ? "I8" : "BF16";
  const std::string prefix = std::string(kSection) + ".weights.";
  // every tensor's element type as its place says, before any value is used
  for (const auto& [name, dtype] : *dtypes) {
    const bool weight = name.rfind(prefix, 0) == 0;
    const std::string& expected = weight ? want : std::string("F32");
    AK_CHECK(dtype == expected, "{}#{}: dtype {}, expected {} ({})", what, name, dtype, expected,
             weight ? "the section's precision is " + std::string(ops::precision_name(out.precision))
                    : std::string("only the quantized weights are stored in lower precision"));
  }
  const io::Value& weights = f.member("weights");
  AK_CHECK(weights.is_bundle(), "{}: \"weights\" is not a bundle of tensors", at);
  const io::Value* scales = q->find("scales");
  AK_CHECK(int8 == (scales != nullptr), "{}: {} (\"scales\" goes with int8 only)", at,
           int8 ? "int8 weights without \"scales\"" : "bf16 weights with \"scales\"");
  AK_CHECK(!scales || scales->is_bundle(), "{}: \"scales\" is not a bundle of tensors", at);
  const int64_t matrices = f.integer("matrices", 0, int64_t{1} << 20);
  AK_CHECK(int64_t(weights.members().size()) == matrices, "{}: \"matrices\" says {}, \"weights\" holds {}", at,
           matrices, weights.members().size());
  if (scales)
    for (const auto& [name, s] : scales->members())
      AK_CHECK(weights.find(name) != nullptr, "{}#{}.scales.{}: a scale vector without its weight", what, kSection,
               name);
  for (const auto& [name, value] : weights.members()) {
    const std::string tw = what + "#" + prefix + name;
    AK_CHECK(value.is_tensor() && value.tensor().rank() == 2, "{}: not a matrix [O, I]", tw);
    const Tensor& t = value.tensor();
    const int64_t O = t.dim(0), I = t.dim(1);
    ops::LowpWeights l;
    if (int8) {
      const std::string ts = what + "#" + kSection + ".scales." + name;
      const io::Value* sv = scales->find(name);
      AK_CHECK(sv != nullptr, "{}: no scale vector (int8 weights have one, [O])", ts);
      AK_CHECK(sv->is_tensor() && sv->tensor().rank() == 1 && sv->tensor().dim(0) == O,
               "{}: shape {}, expected [{}] (one scale per row of {} [{}, {}])", ts,
               sv->is_tensor() ? sv->tensor().shape_str() : std::string("(not a tensor)"), O, name, O, I);
      std::vector<int8_t> qv(size_t(t.numel()));
      for (int64_t i = 0; i < t.numel(); ++i) {
        AK_CHECK(t[i] >= -127 && t[i] <= 127 && t[i] == std::nearbyint(t[i]),
                 "{}: value [{}, {}] = {} is outside [-127, 127]", tw, i / I, i % I, t[i]);
        qv[size_t(i)] = static_cast<int8_t>(t[i]);
      }
      const Tensor& s = sv->tensor();
      l = ops::lowp_from_q8(std::move(qv), std::vector<float>(s.data(), s.data() + O), O, I, tw);
    } else {
      std::vector<uint16_t> bits(size_t(t.numel()));
      for (int64_t i = 0; i < t.numel(); ++i) {
        AK_CHECK(std::isfinite(t[i]), "{}: value [{}, {}] is {}", tw, i / I, i % I, t[i]);
        bits[size_t(i)] = ops::to_bf16(t[i]);  // exact: the value was read from a bfloat16
      }
      l = ops::lowp_from_bf16(std::move(bits), O, I, tw);
    }
    const std::vector<std::string> path = place(name, what);
    if (const Tensor* both = find_placed(checkpoint, path)) {  // also read in float32 (a tied embedding)
      AK_CHECK(both->shape() == t.shape(), "{}#{}: shape {}, but its {} copy is {}", what, name, both->shape_str(),
               ops::precision_name(out.precision), t.shape_str());
    } else {
      Tensor w(t.shape());
      ops::dequantize(l, w.data());
      checkpoint.set_path(path, std::move(w));
    }
    out.weights.emplace(name, std::move(l));
  }
  return out;
}

std::string use_stored_weights(nn::PrecisionPlan& plan, StoredWeights stored, const std::string& what) {
  const std::string_view p = ops::precision_name(stored.precision);
  if (plan.precision() == ops::Precision::Fp32)
    return fmt::format("{}: {} weights ({} matrices) dequantized to float32; --precision {} uses them as stored", what,
                       p, stored.weights.size(), p);
  AK_CHECK(plan.precision() == stored.precision, "{}: holds {} weights; --precision {} would lower them again (use "
           "--precision {}, or fp32 to dequantize them)", what, p, ops::precision_name(plan.precision()), p);
  plan.set_stored(std::move(stored.weights));
  return "";
}

io::Value take_quantized_weights(const io::Value& bundle, const std::string& ref, std::optional<StoredWeights>& stored) {
  stored.reset();
  if (!bundle.is_bundle() || bundle.find(kSection) == nullptr) return bundle;
  std::optional<std::map<std::string, std::string>> dtypes;
  if (ref.find('#') == std::string::npos && io::file_format(ref) == io::FileFormat::Safetensors)
    dtypes = io::safetensors_dtypes(io::read_text(ref), ref);
  io::Value v = bundle;
  stored = take_quantized(v, dtypes ? &*dtypes : nullptr, ref);
  io::Value out;
  for (const auto& [name, member] : v.members())
    if (name != kSection) out.append(name, member);
  return out;
}

}  // namespace attnkit::models
