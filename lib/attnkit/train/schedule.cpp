// Learning-rate schedules (schedule.hpp has the formulas).
#include "attnkit/train/schedule.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "attnkit/tensor/enum_names.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

namespace {

constexpr double kPi = 3.14159265358979323846;

constexpr EnumName<ScheduleKind> kScheduleNames[] = {{ScheduleKind::Constant, "constant"},
                                                     {ScheduleKind::Step, "step"},
                                                     {ScheduleKind::Cosine, "cosine"},
                                                     {ScheduleKind::Noam, "noam"}};

}  // namespace

ScheduleKind parse_schedule_kind(std::string_view name) {
  if (const std::optional<ScheduleKind> kind = parse_name(kScheduleNames, name)) return *kind;
  fail("unknown lr schedule '{}' (expected {})", name, names_or(kScheduleNames));
}

std::string_view schedule_name(ScheduleKind kind) { return name_of(kScheduleNames, kind); }

void validate(const ScheduleOptions& o) {
  const std::string_view name = schedule_name(o.kind);
  AK_CHECK(std::isfinite(o.lr) && o.lr >= 0.0, "{} schedule: lr must be >= 0 and finite, got {}", name, o.lr);
  AK_CHECK(o.warmup_steps >= 0, "{} schedule: warmup_steps must be >= 0, got {}", name, o.warmup_steps);
  switch (o.kind) {
    case ScheduleKind::Constant: break;
    case ScheduleKind::Step:
      AK_CHECK(o.step_size >= 1, "step schedule: step_size must be >= 1, got {}", o.step_size);
      AK_CHECK(std::isfinite(o.gamma) && o.gamma > 0.0, "step schedule: gamma must be > 0 and finite, got {}", o.gamma);
      break;
    case ScheduleKind::Cosine:
      AK_CHECK(o.t_max >= 1, "cosine schedule: t_max must be >= 1, got {}", o.t_max);
      AK_CHECK(std::isfinite(o.eta_min) && o.eta_min >= 0.0, "cosine schedule: eta_min must be >= 0 and finite, got {}",
               o.eta_min);
      break;
    case ScheduleKind::Noam:
      AK_CHECK(o.warmup_steps >= 1, "noam schedule: warmup_steps must be >= 1 (it is the formula's warmup), got {}",
               o.warmup_steps);
      AK_CHECK(o.d_model >= 1, "noam schedule: d_model must be >= 1, got {}", o.d_model);
      AK_CHECK(std::isfinite(o.factor) && o.factor > 0.0, "noam schedule: factor must be > 0 and finite, got {}",
               o.factor);
      break;
  }
}

double learning_rate(const ScheduleOptions& o, int64_t step) {
  validate(o);
  AK_CHECK(step >= 0, "{} schedule: step must be >= 0, got {}", schedule_name(o.kind), step);
  const double s = static_cast<double>(step);
  if (o.kind == ScheduleKind::Noam) {
    const double n = s + 1.0;  // the Annotated Transformer's step, counted from 1
    const double w = static_cast<double>(o.warmup_steps);
    return o.lr * (o.factor * (std::pow(static_cast<double>(o.d_model), -0.5) *
                               std::min(std::pow(n, -0.5), n * std::pow(w, -1.5))));
  }
  double lr = o.lr;
  switch (o.kind) {
    case ScheduleKind::Step: lr = o.lr * std::pow(o.gamma, static_cast<double>(step / o.step_size)); break;
    case ScheduleKind::Cosine:
      lr = o.eta_min + (o.lr - o.eta_min) * (1.0 + std::cos(kPi * s / static_cast<double>(o.t_max))) / 2.0;
      break;
    default: break;
  }
  if (o.warmup_steps > 0 && step < o.warmup_steps) lr *= s / static_cast<double>(o.warmup_steps);
  return lr;
}

std::string schedule_change_note(const ScheduleOptions& options, int64_t checkpoint_t_max, int64_t step) {
  if (options.kind != ScheduleKind::Cosine || checkpoint_t_max <= 0 || checkpoint_t_max == options.t_max ||
      step >= options.t_max)
    return {};
  ScheduleOptions before = options;
  before.t_max = checkpoint_t_max;
  return fmt::format("the cosine schedule runs to step {} (--steps) where the checkpoint's run had it end at step "
                     "{}: the rate at step {} is {:.3g} where the checkpoint's schedule gives {:.3g}{}",
                     options.t_max, checkpoint_t_max, step, learning_rate(options, step), learning_rate(before, step),
                     step >= checkpoint_t_max ? " (a warm restart)" : "");
}

}  // namespace attnkit::train
