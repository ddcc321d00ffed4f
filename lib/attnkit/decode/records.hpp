// transformer-decode's input records and output lines (the library side of the tool, docs/architecture.md, Floors).
//   Input: lines of text (one source per line), or NDJSON records {"src": "text", ...} (one per line; blank
//   lines skipped); Auto takes NDJSON when the first non-blank line starts with '{'.
//   Output: one JSON object per source, the best hypothesis's fields at the top:
//     {"tokens": [...], "text": "...", "score": -1.25}
//     + "normalized": x           when a length penalty ranks the hypotheses
//     + "ended": false            when the best hypothesis stopped at max_len without <eos>
//     + "attention": [[..S..]..]  with attention: one row per output step (each token, then <eos> if ended)
//     + "n_best": [{"tokens", "text", "score", ...}, ...]   with n_best > 1: every hypothesis, best first
#pragma once
#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "attnkit/decode/loader.hpp"
#include "attnkit/decode/search.hpp"

namespace attnkit::decode {

enum class InputFormat { Auto, Text, Ndjson };
InputFormat parse_input_format(std::string_view name);  // "auto", "text", "ndjson"

class SourceReader {
 public:
  // `name` names the input in messages ("standard input").
  SourceReader(std::istream& in, InputFormat format, std::string name);
  // The next source text; false at the end. Refuses (attnkit::Error "standard input: line 3: ...") an empty
  // text line, an NDJSON line that is not an object with a string "src".
  bool next(std::string& text);
  int64_t line() const { return line_; }

 private:
  std::istream& in_;
  InputFormat format_;
  std::string name_;
  int64_t line_ = 0;
};

struct OutputFields {
  bool normalized = false;  // write "normalized"
  bool attention = false;   // write "attention"
  bool n_best = false;      // write the "n_best" list
};
// The output line (no newline) for one source's hypotheses (best first, at least one).
std::string result_json(const LoadedModel& model, const std::vector<Hypothesis>& hyps, const OutputFields& fields);

// The best hypothesis's attention [steps, S] as an SVG heatmap: rows labelled with the output tokens (and
// <eos>), columns with the source's tokens.
void write_alignment_svg(const std::string& path, const LoadedModel& model, std::string_view source_text,
                         const Hypothesis& best);

}  // namespace attnkit::decode
