// autograd::recurrent: the tape node's gradients equal the direct layer backward
// (Recurrent::backward), for every cell, with h0/c0 and lengths; NoGrad records nothing.
// Legend: N batch, T steps, D input size, H hidden size.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/recurrent.hpp"
#include "attnkit/nn/recurrent.hpp"
#include "attnkit/tensor/compare.hpp"
#include "attnkit/tensor/random.hpp"

using namespace attnkit;
using ops::CellKind;

namespace {

void same(const Tensor& got, const Tensor& want, const std::string& what) {
  Comparison c = compare(got, want, Tolerance{1e-6, 1e-5});
  CHECK_MESSAGE(c.same_shape, what << ": shape " << got.shape_str() << " vs " << want.shape_str());
  CHECK_MESSAGE(c.close, what << ": max abs error " << c.max_abs_error);
}

}  // namespace

TEST_CASE("autograd::recurrent: gradients through the tape equal the direct layer backward") {
  Rng rng(303);
  for (CellKind cell : {CellKind::RnnTanh, CellKind::RnnRelu, CellKind::Lstm, CellKind::Gru}) {
    const std::string name = ops::cell_name(cell);
    CAPTURE(name);
    const bool lstm = cell == CellKind::Lstm;
    ops::RecurrentConfig cfg;
    cfg.cell = cell, cfg.input_size = 3, cfg.hidden_size = 5, cfg.layers = 2, cfg.bidirectional = true;
    nn::Recurrent through_tape = nn::Recurrent::random(cfg, rng);
    nn::Recurrent direct = through_tape;  // same weights
    const int64_t N = 3, T = 4, H = 5, LD = 4;
    Tensor x = rand_normal({N, T, 3}, rng), h0 = rand_normal({LD, N, H}, rng), c0 = rand_normal({LD, N, H}, rng);
    const std::vector<int64_t> lengths = {4, 1, 3};
    Tensor dy_out = rand_normal({N, T, 2 * H}, rng), dy_hn = rand_normal({LD, N, H}, rng),
           dy_cn = rand_normal({LD, N, H}, rng);

    // through the tape: the outputs as roots with upstream gradients
    autograd::Var xv(x, true), h0v(h0, true), c0v;
    if (lstm) c0v = autograd::Var(c0, true);
    autograd::RecurrentVars r = through_tape.forward(xv, h0v, c0v, &lengths);
    CHECK(autograd::tape_size() == 1);  // one node for the whole layer
    std::vector<autograd::Var> roots = {r.output, r.h_n};
    std::vector<Tensor> grads = {dy_out, dy_hn};
    if (lstm) roots.push_back(r.c_n), grads.push_back(dy_cn);
    else CHECK_FALSE(r.c_n.defined());
    autograd::backward(roots, grads);
    CHECK(autograd::tape_size() == 0);

    // directly
    ops::RecurrentInputs in;
    in.x = &x, in.h0 = &h0, in.c0 = lstm ? &c0 : nullptr, in.lengths = &lengths;
    ops::RunOptions opt;
    opt.keep_cache = true;
    ops::RecurrentResult res = direct.forward(in, opt);
    same(r.output.value(), res.output, "output");
    same(r.h_n.value(), res.h_n, "h_n");
    Tensor dx(x.shape()), dh0(h0.shape()), dc0(c0.shape());
    ops::RecurrentGradOutputs dy;
    dy.output = &dy_out, dy.h_n = &dy_hn, dy.c_n = lstm ? &dy_cn : nullptr;
    ops::RecurrentGradInputs g;
    g.x = &dx, g.h0 = &dh0, g.c0 = lstm ? &dc0 : nullptr;
    direct.backward(in, res, dy, g);

    same(xv.grad(), dx, "d x");
    same(h0v.grad(), dh0, "d h0");
    if (lstm) same(c0v.grad(), dc0, "d c0");
    auto tape_params = through_tape.named_parameters();
    auto direct_params = direct.named_parameters();
    REQUIRE(tape_params.size() == direct_params.size());
    for (size_t i = 0; i < tape_params.size(); ++i) same(tape_params[i]->grad, direct_params[i]->grad, tape_params[i]->name);
  }
}

TEST_CASE("autograd::recurrent: a frozen input still trains the weights; glue ops after it; NoGrad keeps nothing") {
  Rng rng(304);
  ops::RecurrentConfig cfg;
  cfg.cell = CellKind::Gru, cfg.input_size = 2, cfg.hidden_size = 3;
  nn::Recurrent m = nn::Recurrent::random(cfg, rng);
  nn::Recurrent direct = m;
  Tensor x = rand_normal({2, 3, 2}, rng);
  autograd::Var xv(x, false);  // data: no gradient wanted
  autograd::RecurrentVars r = m.forward(xv);
  autograd::backward(autograd::sum(r.output));  // d sum / d output = 1
  CHECK(xv.grad().empty());
  // the same through the direct backward with dy = ones
  ops::RecurrentInputs in;
  in.x = &x;
  ops::RunOptions opt;
  opt.keep_cache = true;
  ops::RecurrentResult res = direct.forward(in, opt);
  Tensor ones = Tensor::filled(res.output.shape(), 1.0f);
  ops::RecurrentGradOutputs dy;
  dy.output = &ones;
  direct.backward(in, res, dy, {});
  for (size_t i = 0; i < 4; ++i) {
    const Parameter& p = *m.named_parameters()[i];
    same(p.grad, direct.named_parameters()[i]->grad, p.name);
    double norm = 0;
    for (float v : p.grad.values()) norm += double(v) * v;
    CHECK(norm > 0);
  }
  {
    autograd::NoGrad off;
    autograd::RecurrentVars q = m.forward(autograd::Var(x, true));
    CHECK(autograd::tape_size() == 0);
    CHECK_FALSE(q.output.requires_grad());
  }
}
