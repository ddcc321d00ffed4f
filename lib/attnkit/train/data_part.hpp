// One part of a data file, read without the rest: what each shard of a data-parallel run reads
// (docs/distributed.md, "Data").
//
// A file of F bytes is cut into `parts` byte ranges, range p = [p·F / parts, (p+1)·F / parts), and a line
// belongs to the part whose range holds its first byte: every line is in exactly one part, and the parts'
// lines in part order are the file's lines in order, for any number of parts. Reading part p seeks to its
// range, looks at the byte before it (a newline there: the range starts a line; else the range starts inside
// a line of part p−1, whose end is skipped), and reads on to the end of the last line that starts inside the
// range (past the range's end when that line crosses it). A range inside one line gives an empty part.
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include "attnkit/train/data.hpp"

namespace attnkit::train {

struct FilePart {
  std::string text;        // the part's lines, whole ("" for an empty part)
  int64_t begin = 0;       // the file offset of text's first byte
  int64_t range_begin = 0, range_end = 0;  // the byte range the part's lines start in
  int64_t bytes_read = 0;  // bytes read: the byte before the range, the end of the line skipped, and text
};

// Part `part` of `parts` (0 <= part < parts) of the file at `path` (a regular file: "-" and devices, which
// cannot seek, are refused). A NUL byte is refused as read_plain_text does, at its offset in the file.
FilePart read_file_part(const std::string& path, int64_t part, int64_t parts);

// The examples of one part of a data file, as read_corpus reads the whole file (the format from the file's
// name, the byte-order mark of part 0). A bad line is named by its line number in part 0, which starts the
// file ("train.tsv:3: ..."), and by its own byte in the file elsewhere ("train.tsv: the line at byte 1200: ...").
// An empty part, or one with no examples, is an empty Corpus (another part has the file's examples);
// corpus.name is the path. `range`, when given, receives the part's byte range [range_begin, range_end).
Corpus read_corpus_part(const std::string& path, int64_t part, int64_t parts, const DataOptions& options,
                        std::pair<int64_t, int64_t>* range = nullptr);

}  // namespace attnkit::train
