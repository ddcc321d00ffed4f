// Build layers from their config, load PyTorch's weights from a .safetensors state dict under a name prefix,
// and run them forward with the tape off. Prints each layer's largest difference from PyTorch's output.
//   usage: layers data/pytorch.safetensors     (examples/cpp/make_data.py wrote it with PyTorch 1.13)
#include <cstdio>

#include "attnkit/io/tensor_file.hpp"
#include "attnkit/nn/attention.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/recurrent.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/nn/transformer.hpp"
#include "attnkit/tensor/compare.hpp"
#include "attnkit/tensor/error.hpp"

using namespace attnkit;
using autograd::Var;

void report(const char* name, const Var& got, const io::Value& file) {
  const Tensor& want = file.find(std::string("io.expected.") + name)->tensor();
  std::printf("%-14s %-12s max |attnkit - torch| = %.1e\n", name, got.value().shape_str().c_str(),
              compare(got.value(), want).max_abs_error);
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  try {
    const io::Value file = io::read_value_file(argv[1]);  // a bundle: name -> tensor
    const Var x6(file.find("io.x6")->tensor());           // [N, T, 6]
    const Var x4(file.find("io.x4")->tensor());           // [N, T, 4]
    const Var src(file.find("io.src")->tensor());         // [N, S, E]
    const Var tgt(file.find("io.tgt")->tensor());         // [N, T, E]
    autograd::NoGrad no_grad;  // inference: nothing recorded, the fused kernels

    nn::Linear proj(6, 4);  // zeros until loaded
    nn::load_state_dict(proj, file, "proj.");
    report("proj", proj.forward(x6), file);

    ops::RecurrentConfig lstm_config;
    lstm_config.cell = ops::CellKind::Lstm, lstm_config.input_size = 4, lstm_config.hidden_size = 5;
    lstm_config.layers = 2;
    nn::Recurrent lstm(lstm_config);
    nn::load_state_dict(lstm, file, "lstm.");
    report("lstm", lstm.forward(x4).output, file);

    ops::RecurrentConfig gru_config = lstm_config;
    gru_config.cell = ops::CellKind::Gru, gru_config.layers = 1, gru_config.bidirectional = true;
    nn::Recurrent gru(gru_config);
    nn::load_state_dict(gru, file, "gru.");
    report("gru", gru.forward(x4).output, file);

    nn::MultiheadAttention attn(8, 2);  // E = 8, NH = 2
    nn::load_state_dict(attn, file, "attn.");
    report("attn", attn.forward(src, src, src), file);

    nn::TransformerLayerOptions options;  // PyTorch's defaults but for these
    options.d_model = 8, options.heads = 2, options.dim_feedforward = 16, options.dropout = 0.0f;
    nn::TransformerEncoderLayer encoder_layer(options);
    nn::load_state_dict(encoder_layer, file, "encoder.layers.0.");
    report("encoder_layer", encoder_layer.forward(src, {}), file);

    nn::TransformerEncoder encoder(options, 2, "");  // parameters named layers.{0,1}.*, norm.* (no prefix)
    nn::load_state_dict(encoder, file, "encoder.");
    const Var memory = encoder.forward(src, {});
    report("encoder", memory, file);

    ops::MaskSpec causal;  // the decoder's self-attention: PyTorch's generate_square_subsequent_mask
    causal.causal = ops::CausalKind::UpperLeft;
    nn::TransformerDecoderLayer decoder_layer(options);
    nn::load_state_dict(decoder_layer, file, "decoder.layers.0.");
    report("decoder_layer", decoder_layer.forward(tgt, src, causal, {}), file);

    nn::TransformerDecoder decoder(options, 2, "");
    nn::load_state_dict(decoder, file, "decoder.");
    report("decoder", decoder.forward(tgt, memory, causal, {}), file);
  } catch (const Error& e) {
    std::fprintf(stderr, "layers: %s\n", e.what());
    return 1;
  }
  return 0;
}
