// libFuzzer target: the weight loader of lstm-run (nn::Recurrent::from_bundle) for every cell and
// both layouts, then a forward pass over a small input when the weights load, and a save/load
// round trip (to_bundle, then from_bundle again: the same weights).
// Property: only attnkit::Error is thrown; h_n has the shape the loaded config says.
#include "attnkit/app/recurrent_request.hpp"
#include "attnkit/nn/recurrent.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "fuzz_common.hpp"

using namespace attnkit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  io::Value bundle;
  if (!fuzz::parse_weights(data, size, bundle)) return 0;
  for (auto cell : {nn::CellKind::Lstm, nn::CellKind::Gru, nn::CellKind::RnnTanh, nn::CellKind::RnnRelu}) {
    for (auto layout : {nn::WeightLayout::Torch, nn::WeightLayout::Cs231n}) {
      try {
        nn::Recurrent model = nn::Recurrent::from_bundle(bundle, cell, layout);
        const auto& c = model.config();
        if (c.input_size <= 0 || c.hidden_size <= 0 || c.layers <= 0) fuzz::broken("loaded a model with a zero size");
        // a small forward pass: x [2, 3, D], lengths [3, 1]
        Rng rng(1);
        app::SequenceRequest req;
        req.x = rand_normal({2, 3, c.input_size}, rng);
        Tensor lengths({2});
        lengths[0] = 3, lengths[1] = 1;
        req.lengths = &lengths;
        req.layout = layout;
        io::Value out = app::run_sequence(model, req);
        const io::Value* h = out.find("h_n");
        if (!h || !h->is_tensor() || h->tensor().shape() != Shape{c.layers * c.directions(), 2, c.hidden_size})
          fuzz::broken("h_n has the wrong shape");
        // saved and loaded again: the same weights (the cs231n layout folds b_hh into b, so torch only)
        if (layout == nn::WeightLayout::Torch) {
          nn::Recurrent again = nn::Recurrent::from_bundle(model.to_bundle(layout), cell, layout);
          if (!fuzz::same(model.to_bundle(layout), again.to_bundle(layout), true)) fuzz::broken("save/load changed the weights");
        }
      } catch (const Error&) {
      }
    }
  }
  return 0;
}
