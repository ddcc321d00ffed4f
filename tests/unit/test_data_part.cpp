// One part of a data file (train/data_part.hpp): every line in exactly one part, the parts in order being the
// file, each part reading its range (and the end of a line crossing it) only, and a part's bad line named by
// the line's own byte in the file.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "attnkit/train/data_part.hpp"
#include "attnkit/train/data_source.hpp"
#include "test_util.hpp"

using namespace attnkit;
using namespace attnkit::train;
using test::error_of;

namespace {

struct PartFile {
  std::string path;
  PartFile(const std::string& name, const std::string& text)
      : path(std::filesystem::temp_directory_path().string() + "/attnkit_part_" + std::to_string(::getpid()) + "_" +
             name) {
    std::ofstream(path, std::ios::binary) << text;
  }
  ~PartFile() { std::remove(path.c_str()); }
};

}  // namespace

TEST_CASE("data parts: every line in the part holding its first byte, the parts in order being the file") {
  const std::string text = "ab\tb\ncdef\tg\n\nh\ti\njklmnopqrstu\tv\nw\tx";  // a last line without a newline
  PartFile f("lines.tsv", text);
  for (int64_t parts = 1; parts <= int64_t(text.size()) + 2; ++parts) {
    std::string joined;
    for (int64_t p = 0; p < parts; ++p) {
      const FilePart part = read_file_part(f.path, p, parts);
      CHECK(part.range_begin == int64_t(text.size()) * p / parts);
      if (!part.text.empty()) {
        CHECK(part.begin == int64_t(joined.size()));  // the parts follow each other
        CHECK(part.begin >= part.range_begin);
        CHECK(part.begin < part.range_end);           // its first line starts inside its range
        CHECK((part.begin == 0 || text[size_t(part.begin) - 1] == '\n'));
        // it reads its range, the byte before, the end of the line it starts in, and of the line crossing its end
        const size_t last_start = text.rfind('\n', size_t(part.begin + int64_t(part.text.size())) - 2);
        CHECK(int64_t(last_start == std::string::npos ? 0 : last_start + 1) < part.range_end);
      }
      joined += part.text;
    }
    CHECK_MESSAGE(joined == text, parts << " parts");
  }
}

TEST_CASE("data parts: a part reads its own range only") {
  // part 1 (the second half) is bytes no data file holds: part 0 never reads them, part 1 refuses them
  std::string text;
  for (int i = 0; i < 50; ++i) text += "abc\tdef\n";
  const std::string garbage(text.size(), '\0');
  PartFile f("half.tsv", text + garbage);
  const FilePart p0 = read_file_part(f.path, 0, 2);
  CHECK(p0.text == text);
  CHECK(p0.bytes_read == int64_t(text.size()));
  CHECK(read_corpus_part(f.path, 0, 2, DataOptions{}).size() == 50);
  CHECK(error_of([&] { read_file_part(f.path, 1, 2); }) ==
        f.path + ": byte " + std::to_string(text.size()) + " is a NUL byte: not a text file");
}

TEST_CASE("data parts: a part's bad line is named by its byte in the file; a part inside one line is empty") {
  PartFile f("bad.tsv", "a\tb\nc\td\ne\tf\ng h\n");  // 16 bytes; part 1 of 2 is bytes 8..15
  CHECK(read_corpus_part(f.path, 0, 2, DataOptions{}).size() == 2);
  CHECK(error_of([&] { read_corpus_part(f.path, 1, 2, DataOptions{}); }) ==
        f.path + ": the line at byte 12: no tab between source and target");
  std::pair<int64_t, int64_t> range;
  read_corpus_part(f.path, 0, 2, DataOptions{}, &range);
  CHECK(range == std::pair<int64_t, int64_t>{0, 8});
  DataOptions skip;
  skip.skip_bad_lines = true;
  const Corpus c = read_corpus_part(f.path, 1, 2, skip);
  CHECK(c.size() == 1);
  CHECK(c.bad_lines == 1);
  CHECK(c.name == f.path);

  PartFile one("long.jsonl", "{\"src\": \"abcdefghijklmnop\", \"tgt\": \"x\"}\n");
  CHECK(read_file_part(one.path, 2, 4).text.empty());
  CHECK(read_corpus_part(one.path, 2, 4, DataOptions{}).size() == 0);
  CHECK(read_corpus_part(one.path, 0, 4, DataOptions{}).size() == 1);  // JSONL from the name
  CHECK(error_of([&] { read_file_part("-", 0, 2); }) ==
        "-: not a regular file (each process reads its part of the training file, so it must be able to seek)");
}

TEST_CASE("data parts: the parts' examples and merged token counts are the whole file's, for every cut") {
  std::string text;
  for (int i = 0; i < 40; ++i) text += std::string(1, char('a' + i % 7)) + std::string(size_t(i % 5 + 1), 'q') + "\t" +
                                      std::to_string(i * 37 % 11) + "\n";
  PartFile f("whole.tsv", text);
  DataSpec spec;
  spec.train_path = f.path;
  spec.data.target_tokenizer = Tokenizer::Space;
  const TrainingData whole = load_training_data(spec);
  for (int64_t parts = 1; parts <= 6; ++parts) {
    const TrainingData d = load_training_parts(spec, single_process(), parts);
    REQUIRE(d.parts.size() == size_t(parts));
    std::vector<Example> examples;
    for (const Corpus& c : d.parts) examples.insert(examples.end(), c.examples.begin(), c.examples.end());
    REQUIRE(examples.size() == whole.train.examples.size());
    for (size_t i = 0; i < examples.size(); ++i) {
      CHECK(examples[i].src == whole.train.examples[i].src);
      CHECK(examples[i].tgt == whole.train.examples[i].tgt);
    }
    CHECK(d.src_vocab.tokens() == whole.src_vocab.tokens());
    CHECK(d.tgt_vocab.tokens() == whole.tgt_vocab.tokens());
  }
  VocabBuilder b;
  b.add({"x", "y", "x"});
  const std::string bytes = b.to_bytes();
  CHECK(VocabBuilder::from_bytes(bytes, "counts").build(VocabOrder::FirstSeen).tokens() ==
        b.build(VocabOrder::FirstSeen).tokens());
  CHECK(error_of([&] { VocabBuilder::from_bytes(bytes.substr(0, bytes.size() - 1), "counts"); }) ==
        "counts: token counts cut short");
}
