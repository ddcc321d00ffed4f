#include "attnkit/train/tasks.hpp"

#include <algorithm>
#include <functional>
#include <set>
#include <unordered_set>

#include "attnkit/tensor/error.hpp"

namespace attnkit::train {

namespace {

constexpr uint64_t kTrainStream = 1;
constexpr uint64_t kValidStream = 2;

// Days since 1970-01-01 <-> civil date (proleptic Gregorian; H. Hinnant's algorithms).
int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

Date civil_from_days(int64_t z) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t d = doy - (153 * mp + 2) / 5 + 1;
  const int64_t m = mp < 10 ? mp + 3 : mp - 9;
  const int64_t y = yoe + era * 400 + (m <= 2);
  return Date{static_cast<int>(y), static_cast<int>(m), static_cast<int>(d)};
}

const int64_t kFirstDay = days_from_civil(1950, 1, 1);
const int64_t kLastDay = days_from_civil(2049, 12, 31);

const char* const kMonths[12] = {"january", "february", "march",     "april",   "may",      "june",
                                 "july",    "august",   "september", "october", "november", "december"};
const char* const kWeekdays[7] = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"};

std::string capitalized(std::string s) {
  if (!s.empty()) s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}
std::string upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}
std::string month(const Date& d) { return kMonths[d.month - 1]; }
std::string mon(const Date& d) { return month(d).substr(0, 3); }
std::string weekday(const Date& d) {
  // 1970-01-01 was a Thursday (index 3).
  const int64_t z = days_from_civil(d.year, d.month, d.day);
  return kWeekdays[((z % 7) + 7 + 3) % 7];
}
std::string ordinal(int day) {
  const char* suffix = "th";
  if (day % 100 < 11 || day % 100 > 13) {
    if (day % 10 == 1) suffix = "st";
    if (day % 10 == 2) suffix = "nd";
    if (day % 10 == 3) suffix = "rd";
  }
  return fmt::format("{}{}", day, suffix);
}

using Writer = std::function<std::string(const Date&)>;

const std::vector<std::pair<std::string, Writer>>& formats() {
  static const std::vector<std::pair<std::string, Writer>> list = {
      {"d month yyyy", [](const Date& d) { return fmt::format("{} {} {}", d.day, month(d), d.year); }},
      {"mon d, yy", [](const Date& d) { return fmt::format("{} {}, {:02}", mon(d), d.day, d.year % 100); }},
      {"dd/mm/yyyy", [](const Date& d) { return fmt::format("{:02}/{:02}/{}", d.day, d.month, d.year); }},
      {"Month dth, yyyy",
       [](const Date& d) { return fmt::format("{} {}, {}", capitalized(month(d)), ordinal(d.day), d.year); }},
      {"yyyy.mm.dd", [](const Date& d) { return fmt::format("{}.{:02}.{:02}", d.year, d.month, d.day); }},
      {"mm-dd-yyyy", [](const Date& d) { return fmt::format("{:02}-{:02}-{}", d.month, d.day, d.year); }},
      {"d mon yyyy", [](const Date& d) { return fmt::format("{} {} {}", d.day, mon(d), d.year); }},
      {"Weekday, Month d, yyyy",
       [](const Date& d) {
         return fmt::format("{}, {} {}, {}", capitalized(weekday(d)), capitalized(month(d)), d.day, d.year);
       }},
      {"d.m.yy", [](const Date& d) { return fmt::format("{}.{}.{:02}", d.day, d.month, d.year % 100); }},
      {"MON dd yyyy", [](const Date& d) { return fmt::format("{} {:02} {}", upper(mon(d)), d.day, d.year); }},
      {"the dth of month yyyy",
       [](const Date& d) { return fmt::format("the {} of {} {}", ordinal(d.day), month(d), d.year); }},
      {"yyyymmdd", [](const Date& d) { return fmt::format("{}{:02}{:02}", d.year, d.month, d.day); }},
      {"d/m/yy", [](const Date& d) { return fmt::format("{}/{}/{:02}", d.day, d.month, d.year % 100); }},
      {"month d yyyy", [](const Date& d) { return fmt::format("{} {} {}", month(d), d.day, d.year); }},
      {"yyyy-mm-dd", [](const Date& d) { return fmt::format("{}-{:02}-{:02}", d.year, d.month, d.day); }},
      {"dd MONTH yyyy", [](const Date& d) { return fmt::format("{:02} {} {}", d.day, upper(month(d)), d.year); }},
      {"wkd d mon yy",
       [](const Date& d) { return fmt::format("{} {} {} {:02}", weekday(d).substr(0, 3), d.day, mon(d), d.year % 100); }},
  };
  return list;
}

// Every character the date formats can write, in byte order: render a leap year's every day in every
// format (all months, weekdays, days 1-31, every digit).
std::vector<std::string> date_source_chars() {
  std::set<char> chars;
  for (int64_t z = days_from_civil(2020, 1, 1); z <= days_from_civil(2020, 12, 31); ++z)
    for (size_t f = 0; f < formats().size(); ++f)
      for (char c : write_date(civil_from_days(z), f)) chars.insert(c);
  std::vector<std::string> out;
  for (char c : chars) out.emplace_back(1, c);
  return out;
}

// sum_{L = lo..hi} V^L, saturated at 2^62.
int64_t token_space(int64_t V, int64_t lo, int64_t hi) {
  constexpr int64_t kCap = int64_t{1} << 62;
  int64_t total = 0, power = 1;
  for (int64_t L = 1; L <= hi; ++L) {
    power = power > kCap / V ? kCap : power * V;
    if (L >= lo) total = total > kCap - power ? kCap : total + power;
    if (total == kCap) break;
  }
  return total;
}

enum class Kind { Copy, Reverse, Sort, Dates };

Example draw(Kind kind, const TaskOptions& o, Rng& rng) {
  Example ex;
  if (kind == Kind::Dates) {
    const auto span = static_cast<uint32_t>(kLastDay - kFirstDay + 1);
    const Date d = civil_from_days(kFirstDay + uniform_below(rng, span));
    const size_t f = uniform_below(rng, static_cast<uint32_t>(formats().size()));
    ex.src = tokenize(write_date(d, f), Tokenizer::Char);
    ex.tgt = tokenize(iso_date(d), Tokenizer::Char);
    return ex;
  }
  const auto len = o.min_len + uniform_below(rng, static_cast<uint32_t>(o.max_len - o.min_len + 1));
  std::vector<uint32_t> seq(static_cast<size_t>(len));
  for (auto& t : seq) t = uniform_below(rng, static_cast<uint32_t>(o.vocab_size));
  std::vector<uint32_t> out = seq;
  if (kind == Kind::Reverse) std::reverse(out.begin(), out.end());
  if (kind == Kind::Sort) std::sort(out.begin(), out.end());
  for (auto t : seq) ex.src.push_back(std::to_string(t));
  for (auto t : out) ex.tgt.push_back(std::to_string(t));
  return ex;
}

std::string key_of(const std::vector<std::string>& tokens) {
  std::string k;
  for (const auto& t : tokens) {
    k += t;
    k += '\x1f';
  }
  return k;
}

}  // namespace

uint32_t uniform_below(Rng& rng, uint32_t n) {
  AK_CHECK(n >= 1, "uniform_below: n must be >= 1");
  // Largest multiple of n that fits in 2^32: draws at or above it are rejected.
  const uint64_t limit = (uint64_t{1} << 32) / n * n;
  for (;;) {
    const uint64_t x = rng.next_u32();
    if (x < limit) return static_cast<uint32_t>(x % n);
  }
}

const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names = {"copy", "reverse", "sort", "dates"};
  return names;
}

const std::vector<std::string>& date_formats() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& f : formats()) n.push_back(f.first);
    return n;
  }();
  return names;
}

std::string write_date(const Date& date, size_t format) {
  AK_CHECK(format < formats().size(), "dates: format {} is out of range (there are {})", format, formats().size());
  AK_CHECK(date.month >= 1 && date.month <= 12 && date.day >= 1 && date.day <= 31 && date.year >= 0,
           "dates: {}-{}-{} is not a date", date.year, date.month, date.day);
  return formats()[format].second(date);
}

std::string iso_date(const Date& date) { return fmt::format("{:04}-{:02}-{:02}", date.year, date.month, date.day); }

TaskData make_task(const TaskOptions& o) {
  Kind kind;
  if (o.name == "copy") kind = Kind::Copy;
  else if (o.name == "reverse") kind = Kind::Reverse;
  else if (o.name == "sort") kind = Kind::Sort;
  else if (o.name == "dates") kind = Kind::Dates;
  else fail("unknown task \"{}\": expected copy, reverse, sort or dates", o.name);
  const std::string& name = o.name;
  AK_CHECK(o.train_size >= 1, "task {}: the training set size must be >= 1, got {}", name, o.train_size);
  AK_CHECK(o.valid_size >= 0, "task {}: the held-out set size must be >= 0, got {}", name, o.valid_size);
  AK_CHECK(o.train_size <= 100'000'000 && o.valid_size <= 100'000'000,
           "task {}: at most 100000000 examples per set", name);

  TaskData data;
  int64_t space = 0;  // distinct sources; 0 = large (dates: 36525 days x formats)
  if (kind == Kind::Dates) {
    data.src_vocab = Vocab(date_source_chars());
    data.tgt_vocab = Vocab(std::vector<std::string>{"-", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9"});
    data.train.src_tokenizer = data.train.tgt_tokenizer = Tokenizer::Char;
    data.valid.src_tokenizer = data.valid.tgt_tokenizer = Tokenizer::Char;
  } else {
    AK_CHECK(o.vocab_size >= 1 && o.vocab_size <= 100000, "task {}: the vocabulary size must be in [1, 100000], got {}",
             name, o.vocab_size);
    AK_CHECK(o.min_len >= 1 && o.min_len <= o.max_len && o.max_len <= 10000,
             "task {}: lengths must satisfy 1 <= min_len <= max_len <= 10000, got min_len {} and max_len {}", name,
             o.min_len, o.max_len);
    std::vector<std::string> tokens;
    for (int64_t t = 0; t < o.vocab_size; ++t) tokens.push_back(std::to_string(t));
    data.src_vocab = data.tgt_vocab = Vocab(tokens);
    data.train.src_tokenizer = data.train.tgt_tokenizer = Tokenizer::Ids;
    data.valid.src_tokenizer = data.valid.tgt_tokenizer = Tokenizer::Ids;
    space = token_space(o.vocab_size, o.min_len, o.max_len);
    AK_CHECK(o.valid_size < space,
             "task {}: {} distinct held-out sources asked, but only {} sources exist (vocabulary {}, lengths {}-{}) "
             "and the training set needs at least one of its own",
             name, o.valid_size, space, o.vocab_size, o.min_len, o.max_len);
  }
  data.train.name = name + "/train";
  data.valid.name = name + "/valid";

  // Rejection sampling has a budget, so that a space almost used up by the held-out set is an error,
  // not a hang.
  const int64_t budget = 1000 * (o.train_size + o.valid_size) + 1'000'000;
  int64_t attempts = 0;
  auto over_budget = [&](const char* which, int64_t have, int64_t want) {
    fail("task {}: gave up drawing the {} set after {} draws ({} of {} examples; the held-out set of {} leaves too "
         "few other sources): lower valid_size, or widen the lengths or the vocabulary",
         name, which, attempts, have, want, o.valid_size);
  };

  std::unordered_set<std::string> held_out;
  Rng valid_rng(o.seed, kValidStream);
  while (data.valid.size() < o.valid_size) {
    if (++attempts > budget) over_budget("held-out", data.valid.size(), o.valid_size);
    Example ex = draw(kind, o, valid_rng);
    if (!held_out.insert(key_of(ex.src)).second) continue;
    ex.line = data.valid.size() + 1;
    data.valid.examples.push_back(std::move(ex));
  }
  Rng train_rng(o.seed, kTrainStream);
  while (data.train.size() < o.train_size) {
    if (++attempts > budget) over_budget("training", data.train.size(), o.train_size);
    Example ex = draw(kind, o, train_rng);
    if (held_out.count(key_of(ex.src))) continue;
    ex.line = data.train.size() + 1;
    data.train.examples.push_back(std::move(ex));
  }
  return data;
}

}  // namespace attnkit::train
