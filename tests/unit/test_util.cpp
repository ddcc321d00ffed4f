#include "test_util.hpp"

#include "attnkit/train/trainer.hpp"

namespace attnkit::test {

train::TrainingData tiny_reverse_data(int64_t vocab_size, int64_t min_len, int64_t max_len, int64_t valid_size,
                                      uint64_t seed) {
  train::DataSpec spec;
  train::TaskOptions t;
  t.name = "reverse";
  t.vocab_size = vocab_size;
  t.min_len = min_len;
  t.max_len = max_len;
  t.train_size = 40;
  t.valid_size = valid_size;
  t.seed = seed;
  spec.task = t;
  return train::load_training_data(spec);
}

train::TrainerOptions tiny_trainer_options(ops::CellKind cell, models::AttentionKind attention, int64_t embed,
                                           int64_t hidden, int64_t steps, int64_t log_every, const std::string& save) {
  train::TrainerOptions o;
  o.model.cell = cell;
  o.model.attention = attention;
  o.model.embed = embed;
  o.model.hidden = hidden;
  o.steps = steps;
  o.batch_size = 8;
  o.schedule.lr = 0.01;
  o.log_every = log_every;
  o.save_path = save;
  return o;
}

}  // namespace attnkit::test
