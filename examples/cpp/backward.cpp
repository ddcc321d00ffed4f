// Forward and backward with the tape on: a Transformer encoder layer loaded from PyTorch's weights, the loss
// sum(dy * layer(src)), its gradients with respect to the input and to a weight, read from the Var and the
// Parameter; then the same forward with the tape off, which gives the same numbers bit for bit.
//   usage: backward data/pytorch.safetensors
#include <algorithm>
#include <cstdio>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/nn/transformer.hpp"
#include "attnkit/tensor/compare.hpp"
#include "attnkit/tensor/error.hpp"

using namespace attnkit;
using autograd::Var;

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  try {
    const io::Value file = io::read_value_file(argv[1]);
    nn::TransformerLayerOptions options;
    options.d_model = 8, options.heads = 2, options.dim_feedforward = 16, options.dropout = 0.0f;
    nn::TransformerEncoderLayer layer(options);
    nn::load_state_dict(layer, file, "encoder.layers.0.");

    Var src(file.find("io.src")->tensor(), /*requires_grad=*/true);  // [N, S, E]: a leaf that wants d loss / d src
    const Var dy(file.find("io.dy")->tensor());                       // [N, S, E]
    const Var y = layer.forward(src, {});                             // recorded on this thread's tape
    const Var loss = autograd::sum(autograd::mul(dy, y));             // a scalar
    layer.zero_grad();
    autograd::backward(loss);  // d loss / d src in src.grad(), d loss / d W in each Parameter's grad

    const Tensor& dsrc = src.grad();
    const Tensor& dw = layer.linear1.weight.grad;  // "linear1.weight" [F, E]
    std::printf("loss %.6f\n", loss.value().data()[0]);
    std::printf("d src            %s max |attnkit - torch| = %.1e\n", dsrc.shape_str().c_str(),
                compare(dsrc, file.find("io.grad.src")->tensor()).max_abs_error);
    std::printf("d linear1.weight %s max |attnkit - torch| = %.1e\n", dw.shape_str().c_str(),
                compare(dw, file.find("io.grad.linear1.weight")->tensor()).max_abs_error);

    autograd::NoGrad no_grad;  // the tape off: the inference kernels, the same values
    const Tensor y_inference = layer.forward(src, {}).value();
    const bool same = std::equal(y.value().values().begin(), y.value().values().end(), y_inference.values().begin());
    std::printf("forward with and without the tape: %s\n", same ? "equal" : "different");
    return same ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "backward: %s\n", e.what());
    return 1;
  }
}
