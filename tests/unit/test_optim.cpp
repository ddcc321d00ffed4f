// Optimizers, gradient clipping and lr schedules against torch.optim / clip_grad_norm_ / lr_scheduler
// (tests/fixtures/gen_optim.py), save -> JSON -> restore -> step bit-exactness, and the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/json_writer.hpp"
#include "attnkit/train/clip.hpp"
#include "attnkit/train/optimizer.hpp"
#include "attnkit/train/schedule.hpp"
#include "test_util.hpp"

using namespace attnkit;
using nlohmann::json;
using test::error_of;

namespace {

// Agreement with PyTorch, in float32 ulps. The optimizers run PyTorch's float32 operations in PyTorch's
// order, with its fused multiply-adds (optimizer.cpp), and reproduce torch.optim's bits: 0 ulps against
// Debian's PyTorch 1.13 (AVX2 kernels) on x86-64. A libm whose pow() rounds differently from glibc's
// could move a bias correction by an ulp; then this is the number to revisit, knowing that one ulp
// already hides real differences (computing addcmul without the fma is 1-2 ulps off after a few steps).
constexpr int64_t kOptimizerUlps = 0;
// clip_grad_norm sums squares in double where PyTorch sums in float32 (clip.hpp), so the two may round the
// norm differently; on the fixtures they agree to the bit (0 ulps), 1 is allowed for other SIMD widths.
constexpr int64_t kClipUlps = 1;

float number(const json& j) {
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "NaN") return NAN;
    if (s == "Infinity") return INFINITY;
    if (s == "-Infinity") return -INFINITY;
    FAIL("bad number " << s);
  }
  return static_cast<float>(j.get<double>());  // the fixture writes the float64 that equals the float32
}

// {"shape": [...], "data": [...]} -> Tensor; null -> an empty tensor (grad None).
Tensor tensor_of(const json& j) {
  if (j.is_null()) return Tensor();
  Shape shape = j.at("shape").get<Shape>();
  std::vector<float> data;
  for (const json& x : j.at("data")) data.push_back(number(x));
  return Tensor(shape, data);
}

json fixture(const std::string& name) { return json::parse(test::fixture_text("optim/" + name + ".json")); }

// Distance in float32 ulps (adjacent floats are 1 apart; +0 and -0 are 0 apart).
int64_t ulps(float a, float b) {
  auto ordered = [](float x) {
    int32_t i;
    std::memcpy(&i, &x, sizeof i);
    return i < 0 ? -int64_t(i & 0x7fffffff) : int64_t(i);
  };
  return std::llabs(ordered(a) - ordered(b));
}

// "" when every element of got is within max_ulps of want (NaN matches NaN), else the worst element.
std::string mismatch(const Tensor& got, const Tensor& want, int64_t max_ulps) {
  if (got.shape() != want.shape()) return "shape " + got.shape_str() + " vs " + want.shape_str();
  int64_t worst = -1, worst_ulps = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float a = got[i], b = want[i];
    if (std::isnan(a) && std::isnan(b)) continue;
    const int64_t d = std::isnan(a) || std::isnan(b) ? INT64_MAX : ulps(a, b);
    if (d > max_ulps && d > worst_ulps) worst = i, worst_ulps = d;
  }
  if (worst < 0) return "";
  return fmt::format("at {}: {} vs {} ({} ulps)", shape_str(unravel_index(worst, got.shape())), got[worst],
                     want[worst], worst_ulps);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), sizeof(float) * a.numel()) == 0;
}

// The parameters of the optimizer fixture, in a container whose elements do not move.
struct Params {
  std::deque<Parameter> storage;
  std::vector<Parameter*> list;
  explicit Params(const json& params) {
    for (const auto& [name, value] : params.items()) {
      storage.emplace_back(name, tensor_of(value));
      list.push_back(&storage.back());
    }
  }
  Parameter& operator[](const std::string& name) {
    for (Parameter* p : list)
      if (p->name == name) return *p;
    FAIL("no parameter " << name);
    return storage.front();
  }
};

std::unique_ptr<train::Optimizer> make_optimizer(const json& c, const std::vector<Parameter*>& params,
                                                 std::string kind = "") {
  if (kind.empty()) kind = c.at("optimizer").get<std::string>();
  const json& o = c.at("options");
  if (kind == "sgd") {
    train::SgdOptions s;
    s.lr = o.at("lr");
    s.momentum = o.at("momentum");
    s.dampening = o.at("dampening");
    s.weight_decay = o.at("weight_decay");
    s.nesterov = o.at("nesterov");
    return std::make_unique<train::Sgd>(params, s);
  }
  train::AdamWOptions a;
  a.lr = o.at("lr");
  a.beta1 = o.at("beta1");
  a.beta2 = o.at("beta2");
  a.eps = o.at("eps");
  a.weight_decay = o.at("weight_decay");
  a.amsgrad = o.at("amsgrad");
  if (kind == "adam") return std::make_unique<train::Adam>(params, a);
  return std::make_unique<train::AdamW>(params, a);
}

// Sets the fixture's grads of step `step` (null -> empty grad) and the lr, then steps.
void run_step(train::Optimizer& opt, Params& params, const json& f, const json& c, size_t step) {
  for (const auto& [name, g] : f.at("grads").at(step).items()) params[name].grad = tensor_of(g);
  opt.set_lr(c.at("lrs").at(step).get<double>());
  opt.step();
}

}  // namespace

TEST_CASE("optim: SGD, Adam and AdamW follow torch.optim step by step (fixtures)") {
  const json f = fixture("optimizers");
  REQUIRE(f.at("cases").size() == 13);
  for (const json& c : f.at("cases")) {
    const std::string name = c.at("name");
    CAPTURE(name);
    Params params(f.at("params"));
    auto opt = make_optimizer(c, params.list);
    for (size_t step = 0; step < c.at("expected").size(); ++step) {
      CAPTURE(step);
      std::vector<uint64_t> versions;
      for (Parameter* p : params.list) versions.push_back(p->version);
      run_step(*opt, params, f, c, step);
      for (size_t k = 0; k < params.list.size(); ++k) {
        const Parameter& p = *params.list[k];
        CAPTURE(p.name);
        CHECK(mismatch(p.value, tensor_of(c.at("expected").at(step).at(p.name)), kOptimizerUlps) == "");
        // touched exactly when updated (an empty grad is skipped, as PyTorch skips grad None)
        CHECK(p.version == versions[k] + (p.grad.empty() ? 0 : 1));
      }
    }
  }
}

TEST_CASE("optim: the fixture comparison tells the optimizers apart (negative check)") {
  // Adam run on AdamW's case, and AdamW on Adam-with-L2's case, must not pass the comparison above.
  const json f = fixture("optimizers");
  for (auto [case_name, other] : {std::pair<std::string, std::string>{"adamw_weight_decay", "adam"},
                                  {"adam_weight_decay", "adamw"},
                                  {"sgd_nesterov", "adam"}}) {
    CAPTURE(case_name);
    const json* c = nullptr;
    for (const json& x : f.at("cases"))
      if (x.at("name") == case_name) c = &x;
    REQUIRE(c);
    json patched = *c;
    if (other == "adam") patched["options"].update({{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"amsgrad", false}});
    Params params(f.at("params"));
    auto opt = make_optimizer(patched, params.list, other);
    run_step(*opt, params, f, *c, 0);
    CHECK(mismatch(params["enc.weight"].value, tensor_of(c->at("expected").at(0).at("enc.weight")), 64) != "");
  }
}

TEST_CASE("optim: save -> JSON -> restore -> step gives the same bits as stepping straight through") {
  const json f = fixture("optimizers");
  for (const json& c : f.at("cases")) {
    const std::string name = c.at("name");
    const size_t steps = c.at("expected").size();
    for (size_t stop : {size_t{0}, size_t{3}, size_t{4}}) {  // "emb" has no grad at steps 2 and 3
      CAPTURE(name);
      CAPTURE(stop);
      Params straight(f.at("params"));
      auto a = make_optimizer(c, straight.list);
      for (size_t s = 0; s < steps; ++s) run_step(*a, straight, f, c, s);

      Params first(f.at("params"));
      auto b = make_optimizer(c, first.list);
      for (size_t s = 0; s < stop; ++s) run_step(*b, first, f, c, s);
      const std::string saved = io::to_json(b->state());
      // a fresh process: new parameters holding the saved values, a new optimizer, the state read back
      Params resumed(f.at("params"));
      for (Parameter* p : resumed.list) p->value = first[p->name].value;
      auto r = make_optimizer(c, resumed.list);
      r->load_state(io::parse_json(saved, "saved state"));
      CHECK(io::to_json(r->state()) == saved);
      for (size_t s = stop; s < steps; ++s) run_step(*r, resumed, f, c, s);
      for (Parameter* p : resumed.list) {
        CAPTURE(p->name);
        CHECK(same_bits(p->value, straight[p->name].value));
      }
      CHECK(io::to_json(r->state()) == io::to_json(a->state()));
    }
  }
}

TEST_CASE("optim: the saved state's layout") {
  Parameter w("w", Tensor({2, 2}, {1, 2, 3, 4})), b("b", Tensor({2}, {1, 1}));
  w.grad = Tensor({2, 2}, {0.5f, -0.5f, 1, 0});
  train::AdamOptions o;
  o.amsgrad = true;
  train::Adam adam({&w, &b}, o);
  CHECK(io::to_json(adam.state()) == "{}");
  adam.step();
  adam.step();
  const io::Value s = adam.state();
  CHECK(s.names() == std::vector<std::string>{"w"});  // b had no grad: no state, as in PyTorch
  const io::Value* sw = s.find("w");
  REQUIRE(sw);
  CHECK(sw->names() == std::vector<std::string>{"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"});
  CHECK(sw->find("step")->tensor().shape() == Shape{});
  CHECK(sw->find("step")->tensor()[0] == 2.0f);
  CHECK(sw->find("exp_avg")->tensor().shape() == Shape{2, 2});

  train::SgdOptions so;
  so.momentum = 0.5;
  train::Sgd sgd({&w, &b}, so);
  CHECK(io::to_json(sgd.state()) == "{}");
  sgd.step();
  CHECK(sgd.state().find("w")->names() == std::vector<std::string>{"momentum_buffer"});
  CHECK(same_bits(sgd.state().find("w")->find("momentum_buffer")->tensor(), w.grad));  // first buffer = grad
  train::Sgd plain({&w, &b}, train::SgdOptions{});
  plain.step();
  CHECK(io::to_json(plain.state()) == "{}");
}

TEST_CASE("optim: load_state refuses a state that does not fit, and changes nothing then") {
  Parameter w("enc.weight", Tensor({2, 3})), b("enc.bias", Tensor({3}));
  w.grad = Tensor::filled({2, 3}, 0.1f);
  b.grad = Tensor::filled({3}, -0.2f);
  train::Adam adam({&w, &b}, train::AdamOptions{});
  adam.step();
  const io::Value good = adam.state();
  const std::string before = io::to_json(good);
  auto modified = [&](const std::string& param, const std::string& member, io::Value v) {
    io::Value s = good;
    io::Value entry = *s.find(param);
    entry.set(member, std::move(v));
    s.set(param, entry);
    return s;
  };
  auto without = [&](const std::string& param, const std::string& member) {
    io::Value entry = io::Value::bundle();
    for (const auto& [n, v] : good.find(param)->members())
      if (n != member) entry.set(n, v);
    io::Value s = good;
    s.set(param, entry);
    return s;
  };
  CHECK(error_of([&] { adam.load_state(Tensor({2})); }) ==
        "Adam state: expected a bundle of per-parameter states, got a tensor of shape [2]");
  CHECK(error_of([&] { adam.load_state(io::Value::bundle().set("dec.weight", good.members()[0].second)); }) ==
        "Adam state: 'dec.weight' is not a parameter of this optimizer");
  CHECK(error_of([&] { adam.load_state(modified("enc.bias", "exp_avg", Tensor({2}))); }) ==
        "Adam state: exp_avg of 'enc.bias' has shape [2], expected [3] (the parameter's)");
  CHECK(error_of([&] { adam.load_state(without("enc.weight", "exp_avg_sq")); }) ==
        "Adam state: the state of 'enc.weight' has no exp_avg_sq (expected step, exp_avg, exp_avg_sq)");
  CHECK(error_of([&] { adam.load_state(modified("enc.weight", "max_exp_avg_sq", Tensor({2, 3}))); }) ==
        "Adam state: the state of 'enc.weight' has an unexpected member 'max_exp_avg_sq' (expected step, "
        "exp_avg, exp_avg_sq)");
  CHECK(error_of([&] { adam.load_state(modified("enc.weight", "step", Tensor::scalar(2.5f))); }) ==
        "Adam state: step of 'enc.weight' is 2.5, expected a whole number in [1, 16777216]");
  CHECK(error_of([&] { adam.load_state(modified("enc.weight", "step", Tensor::scalar(0.0f))); }) ==
        "Adam state: step of 'enc.weight' is 0, expected a whole number in [1, 16777216]");
  CHECK(error_of([&] { adam.load_state(modified("enc.weight", "step", Tensor({1}, {3.0f}))); }) ==
        "Adam state: step of 'enc.weight' has shape [1], expected a scalar");
  CHECK(error_of([&] { adam.load_state(modified("enc.weight", "exp_avg", io::Value::other("a string"))); }) ==
        "Adam state: exp_avg of 'enc.weight' is not a tensor: a string");
  CHECK(error_of([&] { adam.load_state(io::Value::bundle().set("enc.weight", Tensor({2, 3}))); }) ==
        "Adam state: the state of 'enc.weight' is not a bundle");
  // An SGD state given to Adam, an Adam state given to SGD, any state given to SGD without momentum.
  train::SgdOptions so;
  so.momentum = 0.9;
  train::Sgd sgd({&w, &b}, so);
  sgd.step();
  CHECK(error_of([&] { adam.load_state(sgd.state()); }) ==
        "Adam state: the state of 'enc.weight' has an unexpected member 'momentum_buffer' (expected step, exp_avg, "
        "exp_avg_sq)");
  CHECK(error_of([&] { sgd.load_state(good); }) ==
        "SGD state: the state of 'enc.weight' has an unexpected member 'step' (expected momentum_buffer)");
  train::Sgd plain({&w, &b}, train::SgdOptions{});
  CHECK(error_of([&] { plain.load_state(sgd.state()); }) ==
        "SGD state: 'enc.weight' has state, but SGD without momentum keeps none (was it saved by another "
        "optimizer?)");
  // amsgrad's extra buffer is required when amsgrad is on
  train::AdamOptions ao;
  ao.amsgrad = true;
  train::Adam ams({&w, &b}, ao);
  CHECK(error_of([&] { ams.load_state(good); }) ==
        "Adam state: the state of 'enc.weight' has no max_exp_avg_sq (expected step, exp_avg, exp_avg_sq, "
        "max_exp_avg_sq)");
  // nothing changed by the refused loads
  CHECK(io::to_json(adam.state()) == before);
}

TEST_CASE("optim: bad hyperparameters are refused, naming the option and the value") {
  Parameter w("w", Tensor({2}));
  std::vector<Parameter*> ps = {&w};
  auto sgd = [&](auto set) {
    train::SgdOptions o;
    set(o);
    return error_of([&] { train::Sgd s(ps, o); });
  };
  CHECK(sgd([](auto& o) { o.lr = -0.1; }) == "SGD: lr must be >= 0 and finite, got -0.1");
  CHECK(sgd([](auto& o) { o.lr = NAN; }) == "SGD: lr must be >= 0 and finite, got nan");
  CHECK(sgd([](auto& o) { o.momentum = -0.5; }) == "SGD: momentum must be >= 0 and finite, got -0.5");
  CHECK(sgd([](auto& o) { o.weight_decay = -1e-4; }) == "SGD: weight_decay must be >= 0 and finite, got -0.0001");
  CHECK(sgd([](auto& o) { o.dampening = INFINITY; }) == "SGD: dampening must be finite, got inf");
  CHECK(sgd([](auto& o) { o.nesterov = true; }) == "SGD: nesterov needs momentum > 0, got momentum 0");
  CHECK(sgd([](auto& o) {
          o.nesterov = true;
          o.momentum = 0.9;
          o.dampening = 0.1;
        }) == "SGD: nesterov needs dampening 0, got dampening 0.1");
  CHECK(sgd([](auto& o) {
          o.nesterov = true;
          o.momentum = 0.9;
        }) == "");
  auto adam = [&](auto set) {
    train::AdamOptions o;
    set(o);
    return error_of([&] { train::Adam a(ps, o); });
  };
  auto adamw = [&](auto set) {
    train::AdamWOptions o;
    set(o);
    return error_of([&] { train::AdamW a(ps, o); });
  };
  CHECK(adam([](auto& o) { o.lr = -1e-3; }) == "Adam: lr must be >= 0 and finite, got -0.001");
  CHECK(adam([](auto& o) { o.beta1 = 1.0; }) == "Adam: beta1 must be in [0, 1), got 1");
  CHECK(adam([](auto& o) { o.beta1 = -0.1; }) == "Adam: beta1 must be in [0, 1), got -0.1");
  CHECK(adam([](auto& o) { o.beta2 = 1.5; }) == "Adam: beta2 must be in [0, 1), got 1.5");
  CHECK(adam([](auto& o) { o.beta2 = NAN; }) == "Adam: beta2 must be in [0, 1), got nan");
  CHECK(adam([](auto& o) { o.eps = -1e-8; }) == "Adam: eps must be >= 0 and finite, got -1e-08");
  CHECK(adam([](auto& o) { o.weight_decay = -0.01; }) == "Adam: weight_decay must be >= 0 and finite, got -0.01");
  CHECK(adamw([](auto& o) { o.beta1 = 1.0; }) == "AdamW: beta1 must be in [0, 1), got 1");
  CHECK(adamw([](auto&) {}) == "");
  CHECK(train::AdamWOptions{}.weight_decay == 0.01);  // PyTorch's AdamW default
  CHECK(train::AdamOptions{}.weight_decay == 0.0);

  train::Sgd s(ps, train::SgdOptions{});
  CHECK(error_of([&] { s.set_lr(-1); }) == "SGD: lr must be >= 0 and finite, got -1");
  CHECK(error_of([&] { s.set_lr(INFINITY); }) == "SGD: lr must be >= 0 and finite, got inf");
  s.set_lr(0.25);
  CHECK(s.lr() == 0.25);

  Parameter w2("w", Tensor({3}));
  CHECK(error_of([&] { train::Sgd bad({&w, &w2}, train::SgdOptions{}); }) ==
        "SGD: two parameters are called 'w' (the optimizer's state is keyed by name)");
  CHECK(error_of([&] { train::Adam bad({&w, nullptr}, train::AdamOptions{}); }) ==
        "Adam: parameter 1 is a null pointer");
}

TEST_CASE("optim: a grad of the wrong shape is refused before anything changes; zero_grad") {
  Parameter a("a", Tensor({2}, {1, 2})), b("b", Tensor({2, 2}));
  a.grad = Tensor({2}, {1, 1});
  b.grad = Tensor({4});
  for (int kind = 0; kind < 2; ++kind) {
    std::unique_ptr<train::Optimizer> opt;
    if (kind == 0) opt = std::make_unique<train::Sgd>(std::vector<Parameter*>{&a, &b}, train::SgdOptions{});
    else opt = std::make_unique<train::AdamW>(std::vector<Parameter*>{&a, &b});
    CHECK(error_of([&] { opt->step(); }) ==
          fmt::format("{}: the grad of 'b' has shape [4], expected [2, 2] (the value's)", opt->name()));
    CHECK(a.value.values() == std::vector<float>{1, 2});
    CHECK(a.version == 0);
    CHECK(io::to_json(opt->state()) == "{}");
  }
  Parameter c("c", Tensor({3}));
  b.grad = Tensor::filled({2, 2}, 3.0f);
  train::Sgd sgd({&a, &b, &c}, train::SgdOptions{});
  sgd.zero_grad();
  CHECK(a.grad.values() == std::vector<float>{0, 0});
  CHECK(b.grad.values() == std::vector<float>(4, 0.0f));
  CHECK(c.grad.empty());  // stays empty: still skipped
  sgd.step();
  CHECK(a.value.values() == std::vector<float>{1, 2});
  CHECK(c.version == 0);
}

TEST_CASE("clip_grad_norm: torch.nn.utils.clip_grad_norm_ (fixtures, error_if_nonfinite=False)") {
  const json f = fixture("clip");
  REQUIRE(f.at("cases").size() == 9);
  for (const json& c : f.at("cases")) {
    const std::string name = c.at("name");
    CAPTURE(name);
    // the generator's parameters: a [3, 4], b [5], c [] (a scalar); a null grad is grad None
    std::deque<Parameter> storage;
    std::vector<Parameter*> params;
    for (auto [n, shape] : {std::pair<std::string, Shape>{"a", {3, 4}}, {"b", {5}}, {"c", {}}}) {
      storage.emplace_back(n, Tensor(shape));
      storage.back().grad = tensor_of(c.at("grads").at(n));
      params.push_back(&storage.back());
    }
    const float want = number(c.at("total_norm"));
    const float got = train::clip_grad_norm(params, {c.at("max_norm").get<double>(), train::NonFinite::Scale});
    CHECK(mismatch(Tensor::scalar(got), Tensor::scalar(want), kClipUlps) == "");
    for (Parameter* p : params) {
      CAPTURE(p->name);
      CHECK(mismatch(p->grad, tensor_of(c.at("clipped").at(p->name)), kClipUlps) == "");
    }
  }
}

TEST_CASE("clip_grad_norm: a non-finite norm is an error by default, the grads untouched") {
  Parameter a("enc.weight", Tensor({2, 2})), b("enc.bias", Tensor({3}));
  a.grad = Tensor({2, 2}, {1, 2, 3, 4});
  b.grad = Tensor({3}, {0, INFINITY, NAN});
  const std::vector<Parameter*> ps = {&a, &b};
  CHECK(error_of([&] { train::clip_grad_norm(ps, {}); }) ==
        "clip_grad_norm: the total L2 norm of the gradients is nan: the grad of 'enc.bias' is inf at [1]");
  CHECK(a.grad.values() == std::vector<float>{1, 2, 3, 4});
  b.grad[2] = 0;
  CHECK(error_of([&] { train::clip_grad_norm(ps, {}); }) ==
        "clip_grad_norm: the total L2 norm of the gradients is inf: the grad of 'enc.bias' is inf at [1]");
  // finite grads whose norm overflows float32
  b.grad = Tensor({3}, {3e38f, 3e38f, 0});
  CHECK(error_of([&] { train::clip_grad_norm(ps, {}); }) ==
        "clip_grad_norm: the total L2 norm of the gradients is inf: too large for float32");
  // large but representable: no float32 overflow in the sum (PyTorch's float32 sum would give inf here)
  b.grad = Tensor({3}, {3e20f, 4e20f, 0});
  a.grad = Tensor({2, 2});
  CHECK(train::clip_grad_norm(ps, {1.0}) == doctest::Approx(5e20).epsilon(1e-6));
  CHECK(b.grad[0] == doctest::Approx(0.6).epsilon(1e-6));
  CHECK(b.grad[1] == doctest::Approx(0.8).epsilon(1e-6));
  CHECK(error_of([&] { train::clip_grad_norm(ps, {0.0}); }) == "clip_grad_norm: max_norm must be > 0 and finite, got 0");
  CHECK(error_of([&] { train::clip_grad_norm(ps, {-1.0}); }) ==
        "clip_grad_norm: max_norm must be > 0 and finite, got -1");
  CHECK(error_of([&] { train::clip_grad_norm(ps, {NAN}); }) ==
        "clip_grad_norm: max_norm must be > 0 and finite, got nan");
  // no grads at all: norm 0, as PyTorch
  Parameter c("c", Tensor({2}));
  CHECK(train::clip_grad_norm({&c}, {}) == 0.0f);
  CHECK(train::grad_norm({}) == 0.0f);
}

TEST_CASE("lr schedules: torch.optim.lr_scheduler values (fixtures)") {
  const json f = fixture("schedules");
  REQUIRE(f.at("cases").size() == 9);
  for (const json& c : f.at("cases")) {
    const std::string name = c.at("name");
    CAPTURE(name);
    const json& o = c.at("options");
    train::ScheduleOptions s;
    s.kind = train::parse_schedule_kind(o.at("kind").get<std::string>());
    s.lr = o.at("lr");
    s.warmup_steps = o.value("warmup_steps", int64_t{0});
    s.step_size = o.value("step_size", s.step_size);
    s.gamma = o.value("gamma", s.gamma);
    s.t_max = o.value("t_max", s.t_max);
    s.eta_min = o.value("eta_min", s.eta_min);
    s.d_model = o.value("d_model", s.d_model);
    s.factor = o.value("factor", s.factor);
    const json& lrs = c.at("lrs");
    for (size_t step = 0; step < lrs.size(); ++step) {
      CAPTURE(step);
      // StepLR and CosineAnnealingLR update the lr recursively (lr *= gamma, ...): the closed form agrees
      // to double rounding
      const double got = train::learning_rate(s, static_cast<int64_t>(step)), want = lrs[step].get<double>();
      CHECK_MESSAGE(std::fabs(got - want) <= 1e-12 * std::max(std::fabs(want), s.lr), got << " vs " << want);
    }
  }
}

TEST_CASE("lr schedules: formulas at chosen steps, parsing and errors") {
  train::ScheduleOptions s;
  s.kind = train::ScheduleKind::Cosine;
  s.lr = 1.0;
  s.t_max = 10;
  s.warmup_steps = 4;
  CHECK(train::learning_rate(s, 0) == 0.0);  // warmup starts from 0
  CHECK(train::learning_rate(s, 2) == doctest::Approx(0.5 * (1 + std::cos(M_PI * 2 / 10)) / 2));
  CHECK(train::learning_rate(s, 10) == doctest::Approx(0.0).scale(1));
  CHECK(train::learning_rate(s, 20) == doctest::Approx(1.0));  // past t_max it rises again, as PyTorch's
  s.kind = train::ScheduleKind::Noam;
  s.d_model = 4;
  s.warmup_steps = 4;
  CHECK(train::learning_rate(s, 0) == doctest::Approx(0.5 * 1 * std::pow(4, -1.5)));  // s = 1
  CHECK(train::learning_rate(s, 3) == doctest::Approx(0.5 * std::pow(4, -0.5)));      // s = 4: the peak
  CHECK(train::learning_rate(s, 15) == doctest::Approx(0.5 * 0.25));                  // s = 16

  CHECK(train::parse_schedule_kind("constant") == train::ScheduleKind::Constant);
  CHECK(train::parse_schedule_kind("step") == train::ScheduleKind::Step);
  CHECK(train::parse_schedule_kind("cosine") == train::ScheduleKind::Cosine);
  CHECK(train::parse_schedule_kind("noam") == train::ScheduleKind::Noam);
  for (auto k : {train::ScheduleKind::Constant, train::ScheduleKind::Step, train::ScheduleKind::Cosine,
                 train::ScheduleKind::Noam})
    CHECK(train::parse_schedule_kind(train::schedule_name(k)) == k);
  CHECK(error_of([] { train::parse_schedule_kind("Cosine"); }) ==
        "unknown lr schedule 'Cosine' (expected constant, step, cosine or noam)");
  CHECK(error_of([] { train::parse_schedule_kind(""); }) ==
        "unknown lr schedule '' (expected constant, step, cosine or noam)");

  auto err = [](train::ScheduleKind kind, auto set) {
    train::ScheduleOptions o;
    o.kind = kind;
    if (kind == train::ScheduleKind::Noam) o.warmup_steps = 100;
    set(o);
    return error_of([&] { train::learning_rate(o, 0); });
  };
  using K = train::ScheduleKind;
  CHECK(err(K::Constant, [](auto& o) { o.lr = -1; }) == "constant schedule: lr must be >= 0 and finite, got -1");
  CHECK(err(K::Constant, [](auto& o) { o.warmup_steps = -3; }) == "constant schedule: warmup_steps must be >= 0, got -3");
  CHECK(err(K::Step, [](auto& o) { o.step_size = 0; }) == "step schedule: step_size must be >= 1, got 0");
  CHECK(err(K::Step, [](auto& o) { o.gamma = 0; }) == "step schedule: gamma must be > 0 and finite, got 0");
  CHECK(err(K::Cosine, [](auto& o) { o.t_max = 0; }) == "cosine schedule: t_max must be >= 1, got 0");
  CHECK(err(K::Cosine, [](auto& o) { o.eta_min = -0.1; }) ==
        "cosine schedule: eta_min must be >= 0 and finite, got -0.1");
  CHECK(err(K::Noam, [](auto& o) { o.warmup_steps = 0; }) ==
        "noam schedule: warmup_steps must be >= 1 (it is the formula's warmup), got 0");
  CHECK(err(K::Noam, [](auto& o) { o.d_model = 0; }) == "noam schedule: d_model must be >= 1, got 0");
  CHECK(err(K::Noam, [](auto& o) { o.factor = -2; }) == "noam schedule: factor must be > 0 and finite, got -2");
  CHECK(err(K::Noam, [](auto&) {}) == "");
  CHECK(error_of([] { train::learning_rate({}, -1); }) == "constant schedule: step must be >= 0, got -1");
}
