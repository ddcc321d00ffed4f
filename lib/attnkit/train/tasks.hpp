// Built-in synthetic tasks, generated from a seed with attnkit::Rng (the same bits with any compiler).
//
//   copy     a random token sequence -> itself
//   reverse  a random token sequence -> the same tokens in reverse order
//   sort     a random token sequence -> its tokens in ascending numeric order
//            Token sequences: length uniform in [min_len, max_len], tokens uniform in [0, vocab_size),
//            written as decimal ids ("3 0 7" -> "7 0 3"); tokenizer ids; source and target share the
//            vocabulary <pad> <bos> <eos> <unk> 0 1 ... vocab_size-1 (token k has id k + 4).
//   dates    a date written by a human -> ISO 8601 ("January 5th, 2021" -> "2021-01-05"); tokenizer char.
//            Dates uniform over 1950-01-01 .. 2049-12-31; a two-digit year yy is 19yy when yy >= 50, else
//            20yy (so every source has one reading). The format is drawn uniformly from date_formats():
//            numeric dates with '/' or '.' and two-digit years are DAY-first (05/01/2021, 5/1/21, 5.1.21),
//            numeric dates with '-' are MONTH-first (01-05-2021), four-digit years first are year-month-day
//            (2021.01.05, 20210105); with a month name the order is as written. min_len, max_len and
//            vocab_size do not apply. The source vocabulary is every character the formats can write
//            (space , - . / 0-9 a-z A-Z, in byte order), the target's "-" and 0-9.
//
// The sets: the held-out (validation) set is drawn first, from Rng(seed, stream 2), with distinct sources;
// the training set then from Rng(seed, stream 1), skipping any source in the held-out set (training sources
// may repeat). So the two never overlap, and the held-out set depends only on seed, valid_size and the
// task's own options, not on train_size. A space too small for the sizes asked is an error.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/tensor/random.hpp"
#include "attnkit/train/data.hpp"

namespace attnkit::train {

struct TaskOptions {
  std::string name = "reverse";  // copy | reverse | sort | dates
  int64_t vocab_size = 10;       // copy/reverse/sort: tokens 0 .. vocab_size-1, in [1, 100000]
  int64_t min_len = 1;           // copy/reverse/sort: sequence lengths, 1 <= min_len <= max_len <= 10000
  int64_t max_len = 10;
  int64_t train_size = 10000;    // >= 1
  int64_t valid_size = 1000;     // >= 0
  uint64_t seed = 1;
};

struct TaskData {
  Corpus train;  // named "<task>/train", example lines numbered from 1
  Corpus valid;  // "<task>/valid"
  Vocab src_vocab;
  Vocab tgt_vocab;
};

// "copy", "reverse", "sort", "dates".
const std::vector<std::string>& task_names();
// Generates both sets; throws attnkit::Error for an unknown task, options out of range, or a space of
// sources too small for valid_size distinct held-out sources plus the training set.
TaskData make_task(const TaskOptions& options);

// The dates task's pieces, for tests and documentation.
struct Date {
  int year = 2021;
  int month = 1;  // 1-12
  int day = 1;    // 1-31
};
// Format names ("d month yyyy", "mon d, yy", "dd/mm/yyyy", ...), in the order date_formats() numbers them.
const std::vector<std::string>& date_formats();
// `date` written in format `format` (an index into date_formats()).
std::string write_date(const Date& date, size_t format);
std::string iso_date(const Date& date);  // "2021-01-05"

// A uniform integer in [0, n) (n >= 1) by rejection, so exactly uniform and portable.
uint32_t uniform_below(Rng& rng, uint32_t n);

}  // namespace attnkit::train
