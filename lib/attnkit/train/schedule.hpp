// Learning-rate schedules: pure functions of the step.
//
// `step` is the number of optimizer steps already taken (0 for the first step): PyTorch's scheduler
// last_epoch, i.e. the lr an optimizer holds after `step` calls of scheduler.step(). A training loop does
//   for (int64_t step = 0; ...; ++step) { opt.set_lr(learning_rate(schedule, step)); ...; opt.step(); }
//
//   constant  lr
//   step      lr * gamma^floor(step / step_size)                          (StepLR)
//   cosine    eta_min + (lr - eta_min) * (1 + cos(pi * step / t_max)) / 2 (CosineAnnealingLR's closed form;
//             past t_max it rises again, as PyTorch's does: set t_max to the length of the run)
//   noam      lr * factor * d_model^-0.5 * min(s^-0.5, s * warmup_steps^-1.5), s = step + 1
//             (The Annotated Transformer's rate(), with its step counted from 1: the first optimizer step uses
//             s = 1, the second s = 2, as the original NoamOpt did. The 2022 notebook's LambdaLR version calls
//             rate(0) -> rate(1) and rate(1) for the first two steps, so it runs one step behind this one.
//             The lr is LambdaLR's base lr: 1 in the notebook, which sets Adam's lr to 1.)
//
// Linear warmup (constant, step, cosine): the lr above is multiplied by
//   warmup(step) = min(step, warmup_steps) / warmup_steps      (1 when warmup_steps is 0)
// so it ramps linearly from 0 at step 0 to the full value at step warmup_steps, and the schedule runs on
// underneath (the same step counts for both: cosine's t_max includes the warmup). This is PyTorch's
// LinearLR(start_factor=0, total_iters=warmup_steps) chained with the schedule (LinearLR itself refuses a
// start factor of 0; LambdaLR(lambda s: min(s, W) / W) is the same). Note that the first step (step 0) then
// has lr 0. Noam has its own warmup, built into its formula (linear up to step warmup_steps, then
// s^-0.5): there warmup_steps is that formula's parameter, and must be >= 1.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace attnkit::train {

enum class ScheduleKind { Constant, Step, Cosine, Noam };

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::Constant;
  double lr = 1e-3;            // >= 0: the base (peak) lr; noam's multiplier (LambdaLR's base lr)
  int64_t warmup_steps = 0;    // >= 0; noam: >= 1
  // step
  int64_t step_size = 1;       // >= 1
  double gamma = 0.1;          // > 0
  // cosine
  int64_t t_max = 1;           // >= 1
  double eta_min = 0.0;        // >= 0
  // noam
  int64_t d_model = 512;       // >= 1
  double factor = 1.0;         // > 0
};

// "constant", "step", "cosine", "noam"; anything else is an attnkit::Error listing these.
ScheduleKind parse_schedule_kind(std::string_view name);
std::string_view schedule_name(ScheduleKind kind);

// Throws attnkit::Error naming the option and its value ("cosine schedule: t_max must be >= 1, got 0").
void validate(const ScheduleOptions& options);

// The lr for optimizer step `step` (>= 0). Validates the options first.
double learning_rate(const ScheduleOptions& options, int64_t step);

// A run resumed at `step` under a cosine schedule whose t_max is the run's length (`options.t_max`, from
// --steps) where the checkpoint's run had another length (`checkpoint_t_max`) takes other rates from `step` on
// than the checkpoint's run would have: a finished run resumed with a longer one starts a second, lower cosine
// (a warm restart, as SGDR's). Returns the sentence saying so, with both rates at `step`; "" when the rates
// agree (another schedule, the same length, nothing left to train) or checkpoint_t_max is 0 (not known).
std::string schedule_change_note(const ScheduleOptions& options, int64_t checkpoint_t_max, int64_t step);

}  // namespace attnkit::train
