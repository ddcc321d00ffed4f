// libFuzzer target: the quantized checkpoint reader (decode::load_safetensors_checkpoint with its "quantized"
// section, models/quantized_checkpoint.hpp: what transformer-decode, seq2seq-eval read). The seeds in
// corpus/quantized_checkpoint are tiny models saved by transformer-decode --save-quantized (int8 and bf16, a
// Transformer and a recurrent seq2seq with attention).
// Properties: any input is refused with attnkit::Error (never anything else, never a crash, never an allocation
// far beyond the input's own numbers); a file that loads takes its stored copies in its own precision and decodes
// a short source (a translation model) without failing otherwise; written again as a quantized checkpoint and read back, its stored copies are
// the same values and scales (and the matrices it kept in float32 lowered now).
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "attnkit/decode/loader.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/checkpoint.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/threads.hpp"
#include "fuzz_common.hpp"

using namespace attnkit;

namespace {

bool same_weights(const models::StoredWeights& a, const models::StoredWeights& b) {
  // b may hold more: a matrix the file kept in float32 is lowered by a plan without --keep-fp32 patterns
  if (a.precision != b.precision || a.weights.size() > b.weights.size()) return false;
  for (const auto& [name, w] : a.weights) {
    const auto it = b.weights.find(name);
    if (it == b.weights.end()) return false;
    const ops::LowpWeights& v = it->second;
    if (w.out != v.out || w.in != v.in || w.q8.q != v.q8.q || w.bf16.w != v.bf16.w) return false;
    for (size_t i = 0; i < w.q8.scale.size(); ++i)  // bit for bit (a scale is finite)
      if (w.q8.scale[i] != v.q8.scale[i]) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  set_num_threads(1);
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  decode::LoadedModel m;
  try {
    m = decode::load_safetensors_checkpoint(bytes, "q.safetensors");
  } catch (const Error&) {
    return 0;
  }
  if (!m.stored) return 0;  // a plain checkpoint: the checkpoint target's
  const models::StoredWeights stored = *m.stored;
  try {
    nn::PrecisionPlan plan(stored.precision);
    models::use_stored_weights(plan, stored, "q.safetensors");
    m.model->set_precision(plan);
    if (m.family == "recurrent" || m.family == "transformer") {
      decode::SearchOptions o;
      decode::use_special_ids(m, o);
      o.max_len = 4;
      decode::search(*m.model, {{m.src_vocab.unk_id()}}, o, 0);
    }
    m.stored.reset();
    const std::string path = "again.safetensors";
    io::Value v = models::checkpoint_head(*m.model);
    const std::map<std::string, std::string> dtypes = models::add_quantized_parameters(v, *m.model, plan);
    io::Value back = io::read_document(io::safetensors_bytes(v, path, dtypes), io::FileFormat::Safetensors, path);
    const std::map<std::string, std::string> back_types =
        io::safetensors_dtypes(io::safetensors_bytes(v, path, dtypes), path);
    const std::optional<models::StoredWeights> again = models::take_quantized(back, &back_types, path);
    if (!again || !same_weights(stored, *again)) fuzz::broken("written again, the stored copies changed");
  } catch (const Error&) {
    // a model the file describes may still refuse a search (an empty vocabulary past its specials)
  }
  return 0;
}
