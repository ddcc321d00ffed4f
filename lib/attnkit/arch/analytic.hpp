// compare-arch, part 1: the layer types it compares and what can be said about them on paper.
//
// Legend: n sequence length, d model size, k convolution kernel size, r restricted-attention window
// (keys per query), B batch, L conv-stack depth. FLOPs count a multiply-add as 2.
//
// "Attention Is All You Need", Table 1 (complexity per layer / sequential operations / maximum path
// length), evaluated for the layers exactly as arch/layers.hpp builds them:
//   self-attention      O(n^2 d)   O(1)   O(1)        FLOPs 8nd^2 (q, k, v, out projections) + 4n^2 d (QK^T, PV)
//   recurrent (tanh)    O(n d^2)   O(n)   O(n)        FLOPs 4nd^2 (x W_ih^T hoisted, h W_hh^T per step)
//   convolutional       O(k n d^2) O(1)   O(log_k n)  FLOPs 2knd^2 (one layer; the path is the dilated
//                                                     stack's depth L = min{L >= 1 : k^L >= n})
//   restricted (r)      O(r n d)   O(1)   O(n/r)      FLOPs 8nd^2 + 4 d * (visible query-key pairs),
//                                                     path ceil((n-1) / (r/2)) hops of a centred window
// Activation memory (our column): the float32 tensors one forward creates, the layer's input and
// weights excluded (the peak compare-arch --measure reads back), times 4 bytes and B:
//   self-attention 5nd + 2n^2 (q, k, v, context, output; scores and softmax weights n x n each)
//   recurrent      2nd        (the hoisted input projection, the hidden states = output)
//   convolutional  (k+1)nd    (the im2col copy, the output)
//   restricted     5nd + nr   (q, k, v, context, output; the n x r band of weights)
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::arch {

struct Sizes {
  int64_t n = 512;    // sequence length
  int64_t d = 512;    // model size
  int64_t k = 3;      // convolution kernel size (>= 2)
  int64_t r = 64;     // restricted attention: keys per query (>= 2)
  int64_t batch = 1;  // B
};

// The layer types measured (arch/layers.hpp builds each).
enum class Layer {
  Conv,            // one causal 1-D convolution, kernel k, d -> d channels
  ConvStack,       // L dilated causal convolutions (dilation 1, k, k^2, ...) with ReLU between: reaches all n
  Rnn,             // vanilla tanh RNN, hidden size d
  Lstm,            // LSTM, hidden size d
  Attention,       // single-head self-attention with projections; n x n weights materialised
  AttentionTiled,  // the same through the library's tiled kernel (no n x n matrix)
  LocalAttention,  // restricted self-attention: a centred window of r keys, banded kernel
};
const std::vector<Layer>& all_layers();
std::string_view layer_name(Layer layer);  // "conv", "conv-stack", "rnn", "lstm", "attention", ...
// Throws attnkit::Error naming the known names.
Layer parse_layer(std::string_view name);

// Throws attnkit::Error when a size is out of range (n, d, batch >= 1; k, r >= 2).
void check_sizes(const Sizes& s);

// min{L >= 1 : k^L >= n}: the depth of a dilated stack whose receptive field covers n positions.
int64_t conv_stack_depth(int64_t n, int64_t k);
// Query-key pairs a centred window of r keys leaves visible in a sequence of n (edges clipped).
int64_t local_pairs(int64_t n, int64_t r);

// Forward FLOPs of one layer as built, for B sequences of length n.
double layer_flops(Layer layer, const Sizes& s);
// Bytes of the tensors one forward creates (see the legend), for B sequences.
double layer_activation_bytes(Layer layer, const Sizes& s);
// Time steps that must run one after another (1 for the parallel layers, L for the stack, n for RNNs).
int64_t layer_sequential_steps(Layer layer, const Sizes& s);
// Layers (or steps) a signal crosses from input position 1 to output position n.
int64_t layer_path_length(Layer layer, const Sizes& s);

struct AnalyticRow {
  std::string layer;        // "self-attention", "recurrent", "convolutional", "restricted self-attention"
  std::string complexity;   // the paper's: "O(n^2 d)"
  std::string sequential;   // "O(1)"
  std::string path;         // "O(1)"
  std::string memory;       // our column, as a formula: "5nd + 2n^2"
  Layer measured_as;        // the measured layer type it corresponds to
  double flops = 0;         // evaluated for the given sizes
  int64_t sequential_steps = 0;
  int64_t path_length = 0;
  double activation_bytes = 0;
};
// The four rows of the paper's Table 1, evaluated for `s`.
std::vector<AnalyticRow> analytic_table(const Sizes& s);

}  // namespace attnkit::arch
