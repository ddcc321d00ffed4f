// A quantized checkpoint: a model's checkpoint (models/checkpoint.hpp) whose weight matrices are stored in the
// precision the model multiplies by them (docs/tensor-format.md, "Quantized checkpoints"), so that a run reads
// them as they are instead of lowering float32 values again. Always .safetensors (the only one of the formats
// that stores int8 and bfloat16 elements as such). Beside the model part (format, version, config, the
// tokenizers, vocabularies, spm), the parameters' sub-bundles hold every parameter that is not lowered, float32,
// and a section
//   "quantized": {"precision": "int8" | "bf16", "matrices": "N",
//                 "weights": {NAME: [O, I] I8 (int8) or BF16 (bf16)},   NAME the parameter's state_dict name
//                 "scales":  {NAME: [O] F32}}                           int8 only: s_o, W[o, i] ~ q[o, i] s_o
// A lowered matrix is absent from the parameters, unless the model also reads its float32 values as they are (a
// tied embedding's lookup), which are then stored there too. The file holds no training state: training does
// not resume from it (check_not_averaged refuses it).
#pragma once
#include <map>
#include <optional>
#include <string>

#include "attnkit/io/value.hpp"
#include "attnkit/models/model.hpp"
#include "attnkit/nn/precision.hpp"
#include "attnkit/ops/lowp_weights.hpp"

namespace attnkit::models {

// Adds the parameters and the "quantized" section of `model` as `plan` (taken by the model: set_precision) lowers
// them: a stored copy the plan holds as it is, any other lowered matrix made from its float32 values. Returns the
// element types to write them in (io::safetensors_bytes: "quantized.weights.NAME" -> "I8" or "BF16").
// Refuses a plan in fp32.
// A parameter's place in the document: a name with a dot under its first part ("encoder" + "layers.0.linear1.weight",
// a checkpoint's sub-bundles), one without at the top (lstm-run's "weight_ih_l0", a layer's state_dict).
std::map<std::string, std::string> add_quantized_parameters(io::Value& checkpoint, const nn::Module& model,
                                                            const nn::PrecisionPlan& plan);

// The lowered matrices a quantized checkpoint stores, as the layers hold them ([O, I], PyTorch's row order).
struct StoredWeights {
  ops::Precision precision = ops::Precision::Int8;
  std::map<std::string, ops::LowpWeights> weights;
};

// When `checkpoint` has a "quantized" section: checks it against `dtypes` (the file's element types,
// io::safetensors_dtypes; null when the file is not .safetensors: refused), puts each lowered matrix's float32
// values (int8 q * s, bfloat16 widened) at its parameter's place in the checkpoint (where a parameter stored in
// float32 as well stays as stored), and returns the stored copies; nullopt for a checkpoint without the section.
// Refused, naming `what` and the tensor: a tensor of another element type than its place says (the weights I8
// or BF16 as "precision" says, every other tensor F32), a weight that is not a matrix, a scale vector whose length
// is not the weight's rows, a scale that is not finite or negative (0 only over a row of zeros), -128, a
// bfloat16 NaN or infinity, a scale without its weight, a parameter stored both ways with other shapes, a count
// that is not "matrices". The model's loader then checks the shapes against the config.
std::optional<StoredWeights> take_quantized(io::Value& checkpoint, const std::map<std::string, std::string>* dtypes,
                                            const std::string& what);

// How a run in `plan`'s precision uses the stored copies of `what`: the same precision takes them
// (plan.set_stored; returns ""), fp32 runs on the dequantized values (returns the note to print, "FILE: int8 weights
// (N matrices) dequantized to float32; --precision int8 uses them as stored"); another lower precision is
// refused, naming both (the tools refuse it first, as a usage error).
std::string use_stored_weights(nn::PrecisionPlan& plan, StoredWeights stored, const std::string& what);

// A bundle of weights read from `ref` (lstm-run --weights: PATH or PATH#NAME) without its "quantized" section, and
// the section's stored copies (take_quantized; the element types read from PATH's header when PATH is a whole
// .safetensors file, else refused). A bundle without the section comes back as it is, with nullopt.
io::Value take_quantized_weights(const io::Value& bundle, const std::string& ref, std::optional<StoredWeights>& stored);

}  // namespace attnkit::models
