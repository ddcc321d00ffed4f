// Data side of seq2seq training: tokenizers, vocabularies (and their checkpoint form), TSV/JSONL readers
// with every bad-line reason, the synthetic tasks, batching with exact resume, and the metrics.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/json_writer.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/train/batch.hpp"
#include "attnkit/train/data.hpp"
#include "attnkit/train/metrics.hpp"
#include "attnkit/train/tasks.hpp"
#include "attnkit/train/vocab.hpp"
#include "test_util.hpp"

using namespace attnkit;
using namespace attnkit::train;
using test::error_of;
using Tokens = std::vector<std::string>;
using Ids = std::vector<int64_t>;

namespace {

std::string fixture_path(const std::string& name) { return std::string(ATTNKIT_FIXTURES) + "/data/" + name; }

// The reason tokenize() gives ("" when it succeeds).
std::string reason(std::string_view text, Tokenizer t) {
  Tokens out;
  return tokenize(text, t, out);
}

DataOptions options(Tokenizer t, DataFormat f = DataFormat::Tsv, int64_t max_len = 0) {
  DataOptions o;
  o.tokenizer = t;
  o.format = f;
  o.max_len = max_len;
  return o;
}

// The message of parsing one bad line (as line 2, after a good one).
std::string bad_line(const std::string& line, DataFormat f, Tokenizer t = Tokenizer::Space, int64_t max_len = 0) {
  const std::string good = f == DataFormat::Tsv ? "1 2\t3 4\n" : "{\"src\": \"1 2\", \"tgt\": \"3 4\"}\n";
  return error_of([&] { parse_corpus(good + line + "\n", "in.txt", options(t, f, max_len)); });
}

// Round trip through the JSON text a checkpoint would hold.
io::Value through_json(const io::Value& v) { return io::parse_json(io::to_json(v), "ckpt.json"); }

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Tokenizers

TEST_CASE("tokenize: char splits into UTF-8 characters, spaces included") {
  CHECK(tokenize("jan 5", Tokenizer::Char) == Tokens{"j", "a", "n", " ", "5"});
  CHECK(tokenize("n\xC3\xA9" "e", Tokenizer::Char) == Tokens{"n", "\xC3\xA9", "e"});             // née
  CHECK(tokenize("\xE2\x82\xAC\xF0\x9F\x98\x80", Tokenizer::Char) == Tokens{"\xE2\x82\xAC", "\xF0\x9F\x98\x80"});  // € 😀
  CHECK(tokenize("", Tokenizer::Char).empty());
  CHECK(reason("\xFF", Tokenizer::Char) == "invalid UTF-8 at byte 1");
  CHECK(reason("ab\xC3", Tokenizer::Char) == "invalid UTF-8 at byte 3");           // truncated
  CHECK(reason("\xC0\xAF", Tokenizer::Char) == "invalid UTF-8 at byte 1");         // overlong '/'
  CHECK(reason("x\xE0\x80\xAF", Tokenizer::Char) == "invalid UTF-8 at byte 2");    // overlong, 3 bytes
  CHECK(reason("\xED\xA0\x80", Tokenizer::Char) == "invalid UTF-8 at byte 1");     // a surrogate
  CHECK(reason("\xF4\x90\x80\x80", Tokenizer::Char) == "invalid UTF-8 at byte 1"); // past U+10FFFF
  CHECK(reason("\xF0\x80\x80\x80", Tokenizer::Char) == "invalid UTF-8 at byte 1"); // overlong, 4 bytes
  CHECK(reason("a\x80", Tokenizer::Char) == "invalid UTF-8 at byte 2");            // a lone continuation
  CHECK(reason("\xC3\xA9\xC3", Tokenizer::Space) == "invalid UTF-8 at byte 3");    // every tokenizer checks
}

TEST_CASE("tokenize: space splits on runs of spaces and tabs and reserves the specials") {
  CHECK(tokenize("  hh ax\t l   ow ", Tokenizer::Space) == Tokens{"hh", "ax", "l", "ow"});
  CHECK(tokenize("   ", Tokenizer::Space).empty());
  CHECK(reason("a <eos> b", Tokenizer::Space) == "\"<eos>\" is a reserved special token");
  CHECK(reason("<pad>", Tokenizer::Space) == "\"<pad>\" is a reserved special token");
  CHECK(reason("<bos>", Tokenizer::Space) == "\"<bos>\" is a reserved special token");
  CHECK(reason("<unk>", Tokenizer::Space) == "\"<unk>\" is a reserved special token");
  CHECK(reason("<eos>x", Tokenizer::Space) == "");  // only the exact texts
  CHECK(error_of([] { tokenize("a <eos>", Tokenizer::Space); }) ==
        "space tokenizer: \"<eos>\" is a reserved special token");
}

TEST_CASE("tokenize: ids are canonical non-negative integers below 2^31") {
  CHECK(tokenize("3 007 0 000", Tokenizer::Ids) == Tokens{"3", "7", "0", "0"});
  CHECK(tokenize("2147483647 0002147483647", Tokenizer::Ids) == Tokens{"2147483647", "2147483647"});
  CHECK(reason("1 -3", Tokenizer::Ids) == "\"-3\" is not a non-negative integer");
  CHECK(reason("x1", Tokenizer::Ids) == "\"x1\" is not a non-negative integer");
  CHECK(reason("+4", Tokenizer::Ids) == "\"+4\" is not a non-negative integer");
  CHECK(reason("1.5", Tokenizer::Ids) == "\"1.5\" is not a non-negative integer");
  CHECK(reason("2147483648", Tokenizer::Ids) == "\"2147483648\" is too large for an id (at most 2147483647)");
  CHECK(reason("99999999999", Tokenizer::Ids) == "\"99999999999\" is too large for an id (at most 2147483647)");
  CHECK(error_of([] { tokenize("a", Tokenizer::Ids); }) == "ids tokenizer: \"a\" is not a non-negative integer");
}

TEST_CASE("tokenizer names and join_tokens") {
  CHECK(tokenizer_from_name("char") == Tokenizer::Char);
  CHECK(tokenizer_from_name("space") == Tokenizer::Space);
  CHECK(tokenizer_from_name("ids") == Tokenizer::Ids);
  CHECK(error_of([] { tokenizer_from_name("words"); }) == "unknown tokenizer \"words\": expected char, space, ids, byte or spm");
  for (Tokenizer t : {Tokenizer::Char, Tokenizer::Space, Tokenizer::Ids})
    CHECK(tokenizer_from_name(tokenizer_name(t)) == t);
  CHECK(join_tokens({"j", "a", "n", " ", "5"}, Tokenizer::Char) == "jan 5");
  CHECK(join_tokens({"hh", "ax"}, Tokenizer::Space) == "hh ax");
  CHECK(join_tokens({"3", "10"}, Tokenizer::Ids) == "3 10");
  CHECK(default_order(Tokenizer::Ids) == VocabOrder::Numeric);
  CHECK(default_order(Tokenizer::Char) == VocabOrder::Frequency);
}

// ---------------------------------------------------------------------------------------------------------
// Vocabulary

TEST_CASE("vocab: specials first, encode and decode") {
  Vocab v({"a", "b", "c"});
  CHECK(v.size() == 7);
  CHECK(v.tokens() == Tokens{"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c"});
  CHECK(Vocab::kPad == 0);
  CHECK(Vocab::kBos == 1);
  CHECK(Vocab::kEos == 2);
  CHECK(Vocab::kUnk == 3);
  CHECK(v.id("<pad>") == 0);
  CHECK(v.id("b") == 5);
  CHECK(v.id("zz") == Vocab::kUnk);
  CHECK(v.contains("c"));
  CHECK_FALSE(v.contains("zz"));
  int64_t unknown = 0;
  CHECK(v.encode({"c", "x", "a", "y"}, &unknown) == Ids{6, 3, 4, 3});
  CHECK(unknown == 2);
  CHECK(v.decode({1, 4, 3, 6, 2, 5, 5}) == Tokens{"a", "<unk>", "c"});  // stops at <eos>
  CHECK(v.decode({4, 0, 0}) == Tokens{"a"});                            // skips <pad>
  CHECK(error_of([&] { v.decode({4, 7}); }) == "vocabulary: id 7 is out of range (the vocabulary has 7 tokens)");
  CHECK(error_of([&] { v.token(-1); }) == "vocabulary: id -1 is out of range (the vocabulary has 7 tokens)");
  CHECK(Vocab().size() == 4);
}

TEST_CASE("vocab: the constructor refuses empty, repeated and special tokens") {
  CHECK(error_of([] { Vocab({"a", ""}); }) == "vocabulary: token 1 is empty");
  CHECK(error_of([] { Vocab({"a", "b", "a"}); }) == "vocabulary: token 2 is \"a\" again (id 4)");
  CHECK(error_of([] { Vocab({"<unk>"}); }) ==
        "vocabulary: token 0 is \"<unk>\", a special token's text (the specials are ids 0-3)");
  CHECK(error_of([] { Vocab({"ok", "\xFF"}); }) == "vocabulary: token 1 is not valid text: invalid UTF-8 at byte 1");
}

TEST_CASE("vocab: builder orders by frequency then text, first appearance, or number") {
  VocabBuilder b;
  b.add({"b", "c", "a", "c"});
  b.add({"d", "a", "c", "10", "2"});
  // counts: c 3, a 2, b 1, d 1, 10 1, 2 1
  CHECK(b.build(VocabOrder::Frequency).tokens() == Tokens{"<pad>", "<bos>", "<eos>", "<unk>", "c", "a", "10", "2", "b", "d"});
  CHECK(b.build(VocabOrder::FirstSeen).tokens() == Tokens{"<pad>", "<bos>", "<eos>", "<unk>", "b", "c", "a", "d", "10", "2"});
  CHECK(b.build(VocabOrder::Frequency, 2).tokens() == Tokens{"<pad>", "<bos>", "<eos>", "<unk>", "c", "a"});
  CHECK(b.build(VocabOrder::Frequency, 1, 5).tokens() == Tokens{"<pad>", "<bos>", "<eos>", "<unk>", "c"});
  CHECK(error_of([&] { b.build(VocabOrder::Numeric); }) == "vocabulary: numeric order needs integer tokens, got \"b\"");
  CHECK(error_of([&] { b.build(VocabOrder::Frequency, 1, 3); }) ==
        "vocabulary: a maximum size of 3 leaves no room for the 4 special tokens");
  VocabBuilder n;
  n.add(tokenize("10 2 0 33 2 9 100", Tokenizer::Ids));
  CHECK(n.build(VocabOrder::Numeric).tokens() ==
        Tokens{"<pad>", "<bos>", "<eos>", "<unk>", "0", "2", "9", "10", "33", "100"});
}

TEST_CASE("vocab: to_value / from_value through JSON") {
  Vocab v({"a", "\"", "\\", "\xC3\xA9", "NaN", "1", " ", "Infinity"});
  io::Value value = v.to_value();
  CHECK(io::to_json(value) ==
        R"({"tokens":["<pad>","<bos>","<eos>","<unk>","a","\"","\\","é","NaN","1"," ","Infinity"]})");
  CHECK(Vocab::from_value(value, "in memory") == v);  // no JSON text in between
  io::Value back = through_json(value);
  Vocab w = Vocab::from_value(back, "ckpt.json: vocab");
  CHECK(w == v);
  // Nested in a checkpoint bundle with tensors beside it.
  io::Value ckpt;
  ckpt.set("step", Tensor::scalar(3.0f));
  ckpt.set_path({"vocab", "source"}, v.to_value());
  ckpt.set_path({"vocab", "target"}, Vocab({"x"}).to_value());
  io::Value ckpt_back = through_json(ckpt);
  CHECK(Vocab::from_value(*ckpt_back.find("vocab")->find("source"), "source") == v);
  CHECK(Vocab::from_value(*ckpt_back.find("vocab")->find("target"), "target") == Vocab({"x"}));
  // The specials alone.
  CHECK(Vocab::from_value(through_json(Vocab().to_value()), "v") == Vocab());
}

TEST_CASE("vocab: from_value refuses what is not a vocabulary") {
  auto from = [](const std::string& json) {
    return error_of([&] { Vocab::from_value(io::parse_json(json, "m.json"), "m.json: vocab"); });
  };
  CHECK(from("[1, 2]") == "m.json: vocab: a vocabulary must be an object {\"tokens\": [...]}");
  CHECK(from("{}") == "m.json: vocab: the vocabulary has no \"tokens\" list");
  CHECK(from(R"({"tokens": [1, 2]})") == "m.json: vocab: \"tokens\" must be a list of strings");
  CHECK(from(R"({"tokens": "abc"})") == "m.json: vocab: \"tokens\" must be a list of strings");
  CHECK(from(R"({"tokens": {"a": "b"}})") == "m.json: vocab: \"tokens\" must be a list of strings");
  CHECK(from(R"({"tokens": ["<pad>", "<bos>", "<eos>"]})") ==
        "m.json: vocab: \"tokens\" has 3 entries; it must start with the 4 special tokens <pad> <bos> <eos> <unk>");
  CHECK(from(R"({"tokens": ["<pad>", "<eos>", "<bos>", "<unk>"]})") ==
        "m.json: vocab: tokens[1] is \"<eos>\", expected \"<bos>\" (ids 0-3 are <pad> <bos> <eos> <unk>)");
  CHECK(from(R"({"tokens": ["<pad>", "<bos>", "<eos>", "<unk>", "a", 7]})") == "m.json: vocab: tokens[5] is not a string");
  CHECK(from(R"({"tokens": ["<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "a"]})") ==
        "m.json: vocab: tokens entry 6 is \"a\" again (id 4)");
  CHECK(from(R"({"tokens": ["<pad>", "<bos>", "<eos>", "<unk>", ""]})") == "m.json: vocab: tokens entry 4 is empty");
  CHECK(from(R"({"tokens": ["<pad>", "<bos>", "<eos>", "<unk>", "<pad>"]})") ==
        "m.json: vocab: tokens entry 4 is \"<pad>\", a special token's text (the specials are ids 0-3)");
}

TEST_CASE("vocab: an exported vocabulary keeps every token at its id, the specials anywhere") {
  auto exported = [](const std::string& json, Vocab::SpecialIds ids = {}) {
    return Vocab::from_exported(io::parse_json(json, "c.json"), ids, "c.json: vocab/target");
  };
  // by their texts' positions
  const Vocab v = exported(R"({"tokens": ["a", "<eos>", "b", "<pad>", "<unk>", "<bos>"]})");
  CHECK(v.pad_id() == 3);
  CHECK(v.bos_id() == 5);
  CHECK(v.eos_id() == 1);
  CHECK(v.unk_id() == 4);
  CHECK(v.id("b") == 2);
  CHECK(v.id("zz") == 4);
  int64_t unknown = 0;
  CHECK(v.encode({"a", "zz", "b"}, &unknown) == Ids{0, 4, 2});
  CHECK(unknown == 1);
  CHECK(v.decode({5, 0, 3, 2, 1, 0}) == Tokens{"a", "b"});
  CHECK(v != Vocab());
  // given ids, any texts
  Vocab::SpecialIds ids;
  ids.pad = 2, ids.bos = 0, ids.eos = 3, ids.unk = 1;
  const Vocab w = exported(R"({"tokens": ["<s>", "[UNK]", "[PAD]", "</s>", "x"]})", ids);
  CHECK(w.bos_id() == 0);
  CHECK(w.eos_id() == 3);
  CHECK(w.id("y") == 1);
  // refused
  auto refused = [&](const std::string& json, Vocab::SpecialIds given = {}) {
    return error_of([&] { exported(json, given); });
  };
  CHECK(refused(R"({"tokens": ["a", "<eos>", "<pad>", "<unk>"]})") ==
        "c.json: vocab/target: no <bos> token in \"tokens\" and no \"bos_id\" in the config");
  ids.eos = 0;
  CHECK(refused(R"({"tokens": ["<s>", "[UNK]", "[PAD]", "</s>"]})", ids) ==
        "c.json: vocab/target: <bos> and <eos> are both id 0 (the special tokens must differ)");
  ids.eos = 4;
  CHECK(refused(R"({"tokens": ["<s>", "[UNK]", "[PAD]", "</s>"]})", ids) ==
        "c.json: vocab/target: eos_id 4 is outside the 4 tokens");
  CHECK(refused(R"({"tokens": ["a", "a"]})") == "c.json: vocab/target: tokens[1] is \"a\" again (id 0)");
  CHECK(refused(R"({"tokens": ["a", ""]})") == "c.json: vocab/target: tokens[1] is empty");
}

TEST_CASE("vocab: given in a file, as JSON or one token per line") {
  const Tokens abc = {"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c"};
  CHECK(parse_vocab("a\nb\nc\n", "v.txt").tokens() == abc);
  CHECK(parse_vocab("<pad>\r\n<bos>\r\n<eos>\r\n<unk>\r\na\r\nb\r\nc", "v.txt").tokens() == abc);
  CHECK(parse_vocab(" \n" "x y\n", "v.txt").tokens() == Tokens{"<pad>", "<bos>", "<eos>", "<unk>", " ", "x y"});
  CHECK(parse_vocab(io::to_json(Vocab({"a", "b", "c"}).to_value()), "v.json").tokens() == abc);
  CHECK(parse_vocab(R"(  {"tokens": ["<pad>", "<bos>", "<eos>", "<unk>", " "]})", "v.json").tokens() ==
        Tokens{"<pad>", "<bos>", "<eos>", "<unk>", " "});
  CHECK(error_of([] { parse_vocab("", "v.txt"); }) == "v.txt: the vocabulary file is empty");
  CHECK(error_of([] { parse_vocab("a\n\nb\n", "v.txt"); }) ==
        "v.txt:2: a blank line (one token per line; a token cannot be empty)");
  CHECK(error_of([] { parse_vocab("a\nb\na\n", "v.txt"); }) == "v.txt: line 3 is \"a\" again (id 4)");
  CHECK(error_of([] { parse_vocab("a\n<eos>\n", "v.txt"); }) ==
        "v.txt: line 2 is \"<eos>\", a special token's text (the specials are ids 0-3)");
  CHECK(error_of([] { parse_vocab("<pad>\n<bos>\na\n", "v.txt"); }) ==
        "v.txt:3: the file starts with 2 of the special tokens; list all four (<pad> <bos> <eos> <unk>) or none");
  CHECK(error_of([] { parse_vocab("{\"tokens\": [\"a\"]}", "v.json"); }) ==
        "v.json: \"tokens\" has 1 entries; it must start with the 4 special tokens <pad> <bos> <eos> <unk>");
  CHECK(error_of([] { parse_vocab("{\"tokens\": ", "v.json"); }).rfind("v.json:1:", 0) == 0);
  CHECK(read_vocab(fixture_path("vocab.txt")).tokens() == Tokens{"<pad>", "<bos>", "<eos>", "<unk>", "hh", "ax", "l", "ow"});
  CHECK(error_of([] { read_vocab(fixture_path("no-such-vocab.txt")); }).find("no-such-vocab.txt") != std::string::npos);
}

TEST_CASE("vocab: the mismatch message for a resume") {
  Vocab saved({"a", "b", "c"});
  CHECK(vocab_difference(saved, "model.json", Vocab({"a", "b", "c"}), "train.tsv") == "");
  CHECK(vocab_difference(saved, "model.json", Vocab({"a", "x", "c"}), "train.tsv") ==
        "token 5 is \"b\" in model.json, \"x\" in train.tsv");
  CHECK(vocab_difference(saved, "model.json", Vocab({"a", "c"}), "train.tsv") ==
        "7 tokens in model.json, 6 in train.tsv; token 5 is \"b\" in model.json, \"c\" in train.tsv");
  CHECK(vocab_difference(saved, "model.json", Vocab({"a", "b", "c", "d"}), "train.tsv") ==
        "7 tokens in model.json, 8 in train.tsv; train.tsv has \"d\" first as token 7");
  CHECK(vocab_difference(saved, "model.json", Vocab({"a", "b"}), "train.tsv") ==
        "7 tokens in model.json, 6 in train.tsv; model.json has \"c\" first as token 6");
  CHECK(error_of([&] { check_same_vocab(saved, "model.json", Vocab({"a"}), "train.tsv", "resume, target"); }) ==
        "resume, target: the vocabulary differs: 7 tokens in model.json, 5 in train.tsv; model.json has \"b\" first "
        "as token 5");
  CHECK(error_of([&] { check_same_vocab(saved, "a", saved, "b", "resume"); }) == "");
}

// ---------------------------------------------------------------------------------------------------------
// Data files

TEST_CASE("data: TSV with line numbers, blank lines, CRLF and a byte-order mark") {
  const std::string text = "\xEF\xBB\xBFhello\thh ax l ow\r\n\n   \nworld\tw er l d\r\nhi\thh ay";
  Corpus c = parse_corpus(text, "g2p.tsv", options(Tokenizer::Space));
  REQUIRE(c.size() == 3);
  CHECK(c.name == "g2p.tsv");
  CHECK(c.examples[0].src == Tokens{"hello"});
  CHECK(c.examples[0].tgt == Tokens{"hh", "ax", "l", "ow"});
  CHECK(c.examples[0].line == 1);
  CHECK(c.examples[1].src == Tokens{"world"});
  CHECK(c.examples[1].tgt == Tokens{"w", "er", "l", "d"});  // no "\r" token
  CHECK(c.examples[1].line == 4);
  CHECK(c.examples[2].line == 5);  // no final newline
  CHECK(c.bad_lines == 0);
  CHECK(c.bad_lines_summary() == "");
  // char keeps spaces inside a side.
  Corpus d = parse_corpus("jan 5\t2021-01-05\n", "d.tsv", options(Tokenizer::Char));
  CHECK(d.examples[0].src == Tokens{"j", "a", "n", " ", "5"});
  CHECK(d.src_tokenizer == Tokenizer::Char);
}

TEST_CASE("data: a target tokenizer of its own") {
  DataOptions o = options(Tokenizer::Char);
  o.target_tokenizer = Tokenizer::Space;
  Corpus c = parse_corpus("hello\thh ax l ow\n", "g2p.tsv", o);
  CHECK(c.examples[0].src == Tokens{"h", "e", "l", "l", "o"});
  CHECK(c.examples[0].tgt == Tokens{"hh", "ax", "l", "ow"});
  CHECK(c.src_tokenizer == Tokenizer::Char);
  CHECK(c.tgt_tokenizer == Tokenizer::Space);
}

TEST_CASE("data: JSONL, chosen by the file name or explicitly") {
  const std::string text = "{\"src\": \"3 4\", \"tgt\": \"4 3\", \"id\": 7}\n\n{\"tgt\": \"5\", \"src\": \"5\"}\n";
  for (const char* name : {"x.jsonl", "x.ndjson", "x.json"}) {
    Corpus c = parse_corpus(text, name, options(Tokenizer::Ids, DataFormat::Auto));
    REQUIRE(c.size() == 2);
    CHECK(c.examples[0].src == Tokens{"3", "4"});
    CHECK(c.examples[0].tgt == Tokens{"4", "3"});
    CHECK(c.examples[1].line == 3);
  }
  CHECK(parse_corpus(text, "x.txt", options(Tokenizer::Ids, DataFormat::Jsonl)).size() == 2);
  // The same text read as TSV (the default for other names) has no tabs.
  CHECK(error_of([&] { parse_corpus(text, "x.txt", options(Tokenizer::Ids, DataFormat::Auto)); }) ==
        "x.txt:1: no tab between source and target");
}

TEST_CASE("data: every bad-line reason names the file, the line and the reason") {
  const auto T = DataFormat::Tsv;
  const auto J = DataFormat::Jsonl;
  CHECK(bad_line("no tab here", T) == "in.txt:2: no tab between source and target");
  CHECK(bad_line("a\tb\tc", T) == "in.txt:2: 2 tabs (expected 1 between source and target)");
  CHECK(bad_line("a\t\tb\tc", T) == "in.txt:2: 3 tabs (expected 1 between source and target)");
  CHECK(bad_line("\tb", T) == "in.txt:2: empty source");
  CHECK(bad_line("a\t", T) == "in.txt:2: empty target");
  CHECK(bad_line("   \tb", T) == "in.txt:2: empty source");  // nothing but spaces, with the space tokenizer
  CHECK(bad_line("a\t   ", T) == "in.txt:2: empty target");
  CHECK(bad_line("a <eos>\tb", T) == "in.txt:2: source: \"<eos>\" is a reserved special token");
  CHECK(bad_line("1 2\t1 x", T, Tokenizer::Ids) == "in.txt:2: target: \"x\" is not a non-negative integer");
  CHECK(bad_line("ab\xFF\tb", T, Tokenizer::Char) == "in.txt:2: source: invalid UTF-8 at byte 3");
  CHECK(bad_line("a b c\td", T, Tokenizer::Space, 2) == "in.txt:2: source has 3 tokens, more than the maximum length 2");
  CHECK(bad_line("a\tb c d", T, Tokenizer::Space, 2) == "in.txt:2: target has 3 tokens, more than the maximum length 2");
  CHECK(bad_line("a b\tc d", T, Tokenizer::Space, 2) == "");  // exactly max_len is fine

  // The parser's own words follow "invalid JSON: " (nlohmann/json's, checked by their start only).
  const auto starts = [](const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; };
  CHECK(starts(bad_line("{\"src\": \"a\", \"tgt\": ", J), "in.txt:2: invalid JSON: parse error at line 1, column 21:"));
  CHECK(starts(bad_line("hello\tworld", J), "in.txt:2: invalid JSON: parse error at line 1, column 1:"));
  CHECK(starts(bad_line("{\"src\": \"a\tb\", \"tgt\": \"c\"}", J),  // a raw tab inside a string
               "in.txt:2: invalid JSON: parse error at line 1, column 11:"));
  CHECK(starts(bad_line("{\"src\": \"a\xFF\", \"tgt\": \"c\"}", J), "in.txt:2: invalid JSON: parse error"));
  CHECK(bad_line("[\"a\", \"b\"]", J) == "in.txt:2: expected a JSON object {\"src\": ..., \"tgt\": ...}");
  CHECK(bad_line("{\"tgt\": \"a\"}", J) == "in.txt:2: missing \"src\"");
  CHECK(bad_line("{\"src\": \"a\"}", J) == "in.txt:2: missing \"tgt\"");
  CHECK(bad_line("{\"src\": 12, \"tgt\": \"a\"}", J) == "in.txt:2: \"src\" is not a string (a number)");
  CHECK(bad_line("{\"src\": \"a\", \"tgt\": null}", J) == "in.txt:2: \"tgt\" is not a string (null)");
  CHECK(bad_line("{\"src\": \"a\", \"tgt\": {}}", J) == "in.txt:2: \"tgt\" is not a string (an object)");
  CHECK(bad_line("{\"src\": true, \"tgt\": \"b\"}", J) == "in.txt:2: \"src\" is not a string (a boolean)");
  CHECK(bad_line("{\"src\": [\"a\"], \"tgt\": \"b\"}", J) == "in.txt:2: \"src\" is not a string (an array)");
  CHECK(bad_line("{\"src\": \"\", \"tgt\": \"b\"}", J) == "in.txt:2: empty source");
  CHECK(bad_line("{\"src\": \"a\", \"tgt\": \" \"}", J) == "in.txt:2: empty target");
  CHECK(bad_line("{\"src\": \"a b c\", \"tgt\": \"b\"}", J, Tokenizer::Space, 2) ==
        "in.txt:2: source has 3 tokens, more than the maximum length 2");
  CHECK(bad_line("{\"src\": \"a\", \"tgt\": \"<pad>\"}", J) == "in.txt:2: target: \"<pad>\" is a reserved special token");
}

TEST_CASE("data: skip_bad_lines counts the bad lines and keeps the first messages") {
  DataOptions o = options(Tokenizer::Char);
  o.target_tokenizer = Tokenizer::Space;
  o.skip_bad_lines = true;
  Corpus c = read_corpus(fixture_path("bad.tsv"), o);
  const std::string file = fixture_path("bad.tsv");
  REQUIRE(c.size() == 3);
  CHECK(c.examples[0].line == 1);
  CHECK(c.examples[1].line == 3);
  CHECK(c.examples[2].line == 7);
  CHECK(c.examples[2].tgt == Tokens{"z", "iy", "b", "r", "ax"});
  CHECK(c.bad_lines == 4);
  CHECK(c.bad_line_messages == Tokens{file + ":2: no tab between source and target",
                                      file + ":4: 2 tabs (expected 1 between source and target)",
                                      file + ":5: empty source", file + ":6: empty target"});
  CHECK(c.bad_lines_summary() == file + ": skipped 4 bad lines; " + file + ":2: no tab between source and target; " +
                                     file + ":4: 2 tabs (expected 1 between source and target); " + file +
                                     ":5: empty source; " + file + ":6: empty target");
  o.max_reported = 2;
  Corpus d = read_corpus(file, o);
  CHECK(d.bad_lines == 4);
  CHECK(d.bad_line_messages.size() == 2);
  CHECK(d.bad_lines_summary() == file + ": skipped 4 bad lines; first: " + file +
                                     ":2: no tab between source and target; " + file +
                                     ":4: 2 tabs (expected 1 between source and target)");
  // Without skipping, the first bad line stops the read.
  o.skip_bad_lines = false;
  CHECK(error_of([&] { read_corpus(file, o); }) == file + ":2: no tab between source and target");
  // One bad line: singular.
  o.skip_bad_lines = true;
  CHECK(parse_corpus("a\tb\nc\n", "one.tsv", o).bad_lines_summary() ==
        "one.tsv: skipped 1 bad line; one.tsv:2: no tab between source and target");
}

TEST_CASE("data: empty files and files with nothing left are errors naming the file") {
  const std::string empty = fixture_path("empty.tsv");
  CHECK(error_of([&] { read_corpus(empty, options(Tokenizer::Char)); }) ==
        empty + ": the file is empty (expected one example per line)");
  CHECK(error_of([] { parse_corpus("\n  \n\n", "blank.tsv", options(Tokenizer::Char)); }) ==
        "blank.tsv: no examples (every line is blank)");
  DataOptions o = options(Tokenizer::Char);
  o.skip_bad_lines = true;
  CHECK(error_of([&] { parse_corpus("x\ny\n", "bad.tsv", o); }) ==
        "bad.tsv: no examples left: bad.tsv: skipped 2 bad lines; bad.tsv:1: no tab between source and target; "
        "bad.tsv:2: no tab between source and target");
  const std::string missing = fixture_path("no-such-file.tsv");
  const std::string message = error_of([&] { read_corpus(missing, options(Tokenizer::Char)); });
  CHECK(message.find(missing) != std::string::npos);
  CHECK(error_of([] { parse_corpus("a\tb", "x.tsv", options(Tokenizer::Char, DataFormat::Tsv, -1)); }) ==
        "x.tsv: the maximum length must be >= 0, got -1");
}

TEST_CASE("data: random bytes give examples or attnkit::Error, never anything else") {
  // Lines built from pieces that hit every branch (tabs, quotes, braces, UTF-8 fragments, specials, digits).
  const std::vector<std::string> pieces = {"\t", " ", "a", "7", "-", "{", "}", "\"", ":", ",", "\"src\"", "\"tgt\"",
                                           "<eos>", "\xC3", "\xA9", "\xFF", "\xF0\x9F\x98\x80", "\r", "\n", "\\", "null"};
  Rng rng(12);
  int64_t read = 0, refused = 0;
  for (int k = 0; k < 3000; ++k) {
    std::string text;
    const uint32_t n = uniform_below(rng, 24);
    for (uint32_t i = 0; i < n; ++i) text += pieces[uniform_below(rng, static_cast<uint32_t>(pieces.size()))];
    DataOptions o = options(static_cast<Tokenizer>(uniform_below(rng, 3)),
                            uniform_below(rng, 2) ? DataFormat::Tsv : DataFormat::Jsonl, uniform_below(rng, 4));
    o.skip_bad_lines = uniform_below(rng, 2) == 1;
    try {
      Corpus c = parse_corpus(text, "fuzz.txt", o);
      for (const auto& ex : c.examples) REQUIRE((!ex.src.empty() && !ex.tgt.empty()));
      ++read;
    } catch (const Error& e) {
      REQUIRE(std::string(e.what()).rfind("fuzz.txt", 0) == 0);  // every message names the file
      ++refused;
    }
  }
  CHECK(read > 5);  // both outcomes happen
  CHECK(refused > 500);
}

TEST_CASE("data: TSV and JSONL fixtures read alike") {
  DataOptions o = options(Tokenizer::Char, DataFormat::Auto);
  o.target_tokenizer = Tokenizer::Space;
  Corpus tsv = read_corpus(fixture_path("pairs.tsv"), o);
  Corpus jsonl = read_corpus(fixture_path("pairs.jsonl"), o);
  REQUIRE(tsv.size() == 3);
  REQUIRE(jsonl.size() == 2);
  for (int i = 0; i < 2; ++i) {
    CHECK(tsv.examples[i].src == jsonl.examples[i].src);
    CHECK(tsv.examples[i].tgt == jsonl.examples[i].tgt);
  }
  CHECK(tsv.examples[2].line == 4);
}

TEST_CASE("data: vocabularies from a corpus, encoding, grouping by source") {
  Corpus c = parse_corpus("ab\tx y\nba\ty\nab\tx z\nab\tx y\n", "c.tsv", [] {
    DataOptions o = options(Tokenizer::Char);
    o.target_tokenizer = Tokenizer::Space;
    return o;
  }());
  Vocab src = build_vocab(c, Side::Source, VocabOrder::Frequency);
  Vocab tgt = build_vocab(c, Side::Target, VocabOrder::FirstSeen);
  CHECK(src.tokens() == Tokens{"<pad>", "<bos>", "<eos>", "<unk>", "a", "b"});
  CHECK(tgt.tokens() == Tokens{"<pad>", "<bos>", "<eos>", "<unk>", "x", "y", "z"});
  CHECK(build_vocab(c, Side::Both, VocabOrder::Frequency).tokens() ==
        Tokens{"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "x", "y", "z"});
  CHECK(error_of([&] { build_vocab(c, Side::Source, VocabOrder::Numeric); }) ==
        "c.tsv: vocabulary: numeric order needs integer tokens, got \"a\"");
  EncodedCorpus e = encode(c, src, Vocab({"x", "y"}));
  CHECK(e.size() == 4);
  CHECK(e.src[1] == Ids{5, 4});
  CHECK(e.tgt[2] == Ids{4, 3});  // z is unknown
  CHECK(e.unknown_src == 0);
  CHECK(e.unknown_tgt == 1);
  std::vector<ReferenceGroup> g = group_by_source(c);
  REQUIRE(g.size() == 2);
  CHECK(g[0].src == Tokens{"a", "b"});
  CHECK(g[0].references == std::vector<Tokens>{{"x", "y"}, {"x", "z"}});  // the repeated "x y" once
  CHECK(g[0].first_example == 0);
  CHECK(g[1].references == std::vector<Tokens>{{"y"}});
  CHECK(g[1].first_example == 1);
}

TEST_CASE("data: the CMU dictionary excerpt as prepared by examples/06-g2p-data/prepare.sh") {
  DataOptions o = options(Tokenizer::Char);
  o.target_tokenizer = Tokenizer::Space;
  Corpus train = read_corpus(fixture_path("cmudict-excerpt/train.tsv"), o);
  Corpus valid = read_corpus(fixture_path("cmudict-excerpt/valid.tsv"), o);
  Corpus test = read_corpus(fixture_path("cmudict-excerpt/test.tsv"), o);
  CHECK(train.size() == 34);
  CHECK(valid.size() == 3);
  CHECK(test.size() == 3);
  std::vector<ReferenceGroup> words = group_by_source(train);
  CHECK(words.size() == 31);
  std::map<std::string, std::vector<std::string>> refs;
  for (const auto& w : words) {
    std::vector<std::string> r;
    for (const auto& ref : w.references) r.push_back(join_tokens(ref, Tokenizer::Space));
    refs[join_tokens(w.src, Tokenizer::Char)] = r;
  }
  // Several pronunciations of a word, stress and syllables dropped, case folded.
  CHECK(refs["a"] == Tokens{"ax", "ey"});
  CHECK(refs["record"] == Tokens{"r eh k er d", "r ax k ao r d"});
  CHECK(refs["live"] == Tokens{"l ay v", "l ih v"});
  CHECK(refs["hello"] == Tokens{"hh ax l ow"});
  CHECK(refs["awol"] == Tokens{"ey w ao l"});
  CHECK(refs["disere"] == Tokens{"d iy s eh r iy"});
  // The split is by word: no spelling on two sides.
  std::set<Tokens> seen;
  for (const Corpus* c : {&train, &valid, &test}) {
    std::set<Tokens> here;
    for (const auto& ex : c->examples) here.insert(ex.src);
    for (const auto& s : here) CHECK_MESSAGE(seen.insert(s).second, join_tokens(s, Tokenizer::Char));
  }
  // Phonemes of Festival's CMU set only (lower-case letters), no stress digits.
  Vocab phones = build_vocab(train, Side::Target, VocabOrder::Frequency);
  for (int64_t i = Vocab::kNumSpecials; i < phones.size(); ++i) {
    const std::string& p = phones.token(i);
    CHECK_MESSAGE(std::all_of(p.begin(), p.end(), [](char ch) { return ch >= 'a' && ch <= 'z'; }), p);
  }
  CHECK(phones.size() > 20);
}

// ---------------------------------------------------------------------------------------------------------
// Synthetic tasks

TEST_CASE("tasks: uniform_below is in range, portable and uniform") {
  Rng rng(7);
  std::vector<uint32_t> first;
  for (int i = 0; i < 8; ++i) first.push_back(uniform_below(rng, 10));
  Rng again(7);
  for (int i = 0; i < 8; ++i) CHECK(uniform_below(again, 10) == first[i]);
  // The same seed gives these draws with any compiler (PCG32 and rejection only).
  CHECK(first == std::vector<uint32_t>{3, 8, 3, 0, 0, 9, 6, 3});
  std::vector<int64_t> counts(7, 0);
  Rng r(1);
  for (int i = 0; i < 70000; ++i) {
    uint32_t x = uniform_below(r, 7);
    REQUIRE(x < 7);
    ++counts[x];
  }
  for (int64_t c : counts) CHECK(std::abs(c - 10000) < 500);  // 5 standard deviations is ~ 450
  CHECK(uniform_below(r, 1) == 0);
  CHECK(error_of([&] { uniform_below(r, 0); }) == "uniform_below: n must be >= 1");
}

TEST_CASE("tasks: copy, reverse and sort are what they say, from the options' ranges") {
  for (const std::string name : {"copy", "reverse", "sort"}) {
    TaskOptions o;
    o.name = name;
    o.vocab_size = 12;
    o.min_len = 3;
    o.max_len = 7;
    o.train_size = 500;
    o.valid_size = 100;
    o.seed = 5;
    TaskData d = make_task(o);
    CHECK(d.train.size() == 500);
    CHECK(d.valid.size() == 100);
    CHECK(d.train.name == name + "/train");
    CHECK(d.valid.name == name + "/valid");
    CHECK(d.train.src_tokenizer == Tokenizer::Ids);
    CHECK(d.src_vocab == d.tgt_vocab);
    CHECK(d.src_vocab.tokens() ==
          Tokens{"<pad>", "<bos>", "<eos>", "<unk>", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"});
    std::set<int64_t> lengths;
    for (const Corpus* c : {&d.train, &d.valid})
      for (const auto& ex : c->examples) {
        REQUIRE(ex.src.size() >= 3);
        REQUIRE(ex.src.size() <= 7);
        lengths.insert(static_cast<int64_t>(ex.src.size()));
        std::vector<int> s, t;
        for (const auto& x : ex.src) s.push_back(std::stoi(x));
        for (const auto& x : ex.tgt) t.push_back(std::stoi(x));
        for (int x : s) REQUIRE((x >= 0 && x < 12));
        std::vector<int> want = s;
        if (name == "reverse") std::reverse(want.begin(), want.end());
        if (name == "sort") std::sort(want.begin(), want.end());
        REQUIRE(t == want);
        REQUIRE(d.src_vocab.encode(ex.src) != Ids{});
      }
    CHECK(lengths == std::set<int64_t>{3, 4, 5, 6, 7});
  }
}

TEST_CASE("tasks: the held-out set is distinct, never overlaps training, and does not depend on train_size") {
  for (const std::string name : {"copy", "reverse", "sort", "dates"}) {
    TaskOptions o;
    o.name = name;
    o.vocab_size = 3;  // copy/reverse/sort: 3 + 9 + 27 + 81 = 120 sources of lengths 1-4
    o.min_len = 1;
    o.max_len = 4;
    o.train_size = 2000;
    o.valid_size = 60;
    o.seed = 11;
    TaskData d = make_task(o);
    std::set<Tokens> held;
    for (const auto& ex : d.valid.examples) CHECK(held.insert(ex.src).second);  // distinct
    int64_t overlap = 0;
    std::set<Tokens> train_sources;
    for (const auto& ex : d.train.examples) {
      overlap += held.count(ex.src);
      train_sources.insert(ex.src);
    }
    CHECK(overlap == 0);
    if (name != "dates") CHECK(train_sources.size() == 60);  // every other source was drawn
    o.train_size = 10;
    TaskData small = make_task(o);
    REQUIRE(small.valid.size() == d.valid.size());
    for (int64_t i = 0; i < d.valid.size(); ++i) CHECK(small.valid.examples[i].src == d.valid.examples[i].src);
    // The first training examples do not depend on train_size either.
    for (int64_t i = 0; i < 10; ++i) CHECK(small.train.examples[i].src == d.train.examples[i].src);
  }
}

TEST_CASE("tasks: the same seed gives the same sets, another seed others") {
  TaskOptions o;
  o.name = "reverse";
  o.vocab_size = 26;
  o.min_len = 5;
  o.max_len = 20;
  o.train_size = 50;
  o.valid_size = 20;
  o.seed = 3;
  TaskData a = make_task(o), b = make_task(o);
  for (int64_t i = 0; i < 50; ++i) CHECK(a.train.examples[i].src == b.train.examples[i].src);
  for (int64_t i = 0; i < 20; ++i) CHECK(a.valid.examples[i].tgt == b.valid.examples[i].tgt);
  o.seed = 4;
  TaskData c = make_task(o);
  int64_t same = 0;
  for (int64_t i = 0; i < 50; ++i) same += a.train.examples[i].src == c.train.examples[i].src;
  CHECK(same == 0);
  // Pinned: the first examples for seed 3 (PCG32 + rejection sampling: the same with any compiler).
  CHECK(join_tokens(a.train.examples[0].src, Tokenizer::Ids) == "13 13 0 17 13 24 18 6 21 10 15 16 6 9");
  CHECK(join_tokens(a.valid.examples[0].src, Tokenizer::Ids) == "9 21 9 21 6 5");
  o.name = "dates";
  o.seed = 3;
  TaskData dates = make_task(o);
  CHECK(join_tokens(dates.train.examples[0].src, Tokenizer::Char) == "1/9/04");
  CHECK(join_tokens(dates.train.examples[0].tgt, Tokenizer::Char) == "2004-09-01");
}

TEST_CASE("tasks: option and space errors") {
  TaskOptions o;
  o.name = "rot13";
  CHECK(error_of([&] { make_task(o); }) == "unknown task \"rot13\": expected copy, reverse, sort or dates");
  o.name = "copy";
  o.train_size = 0;
  CHECK(error_of([&] { make_task(o); }) == "task copy: the training set size must be >= 1, got 0");
  o.train_size = 10;
  o.valid_size = -1;
  CHECK(error_of([&] { make_task(o); }) == "task copy: the held-out set size must be >= 0, got -1");
  o.valid_size = 5;
  o.vocab_size = 0;
  CHECK(error_of([&] { make_task(o); }) == "task copy: the vocabulary size must be in [1, 100000], got 0");
  o.vocab_size = 4;
  o.min_len = 5;
  o.max_len = 4;
  CHECK(error_of([&] { make_task(o); }) ==
        "task copy: lengths must satisfy 1 <= min_len <= max_len <= 10000, got min_len 5 and max_len 4");
  o.vocab_size = 2;
  o.min_len = 1;
  o.max_len = 2;  // 2 + 4 = 6 sources
  o.valid_size = 6;
  CHECK(error_of([&] { make_task(o); }) ==
        "task copy: 6 distinct held-out sources asked, but only 6 sources exist (vocabulary 2, lengths 1-2) and the "
        "training set needs at least one of its own");
  o.valid_size = 5;  // one source left for training: still possible
  TaskData d = make_task(o);
  std::set<Tokens> train_sources;
  for (const auto& ex : d.train.examples) train_sources.insert(ex.src);
  CHECK(train_sources.size() == 1);
  // No held-out set at all.
  o.valid_size = 0;
  CHECK(make_task(o).valid.size() == 0);
  CHECK(task_names() == Tokens{"copy", "reverse", "sort", "dates"});
}

TEST_CASE("tasks: dates written in every format, to ISO") {
  const Date d{2021, 1, 5};
  const std::vector<std::pair<std::string, std::string>> want = {
      {"d month yyyy", "5 january 2021"},
      {"mon d, yy", "jan 5, 21"},
      {"dd/mm/yyyy", "05/01/2021"},
      {"Month dth, yyyy", "January 5th, 2021"},
      {"yyyy.mm.dd", "2021.01.05"},
      {"mm-dd-yyyy", "01-05-2021"},
      {"d mon yyyy", "5 jan 2021"},
      {"Weekday, Month d, yyyy", "Tuesday, January 5, 2021"},
      {"d.m.yy", "5.1.21"},
      {"MON dd yyyy", "JAN 05 2021"},
      {"the dth of month yyyy", "the 5th of january 2021"},
      {"yyyymmdd", "20210105"},
      {"d/m/yy", "5/1/21"},
      {"month d yyyy", "january 5 2021"},
      {"yyyy-mm-dd", "2021-01-05"},
      {"dd MONTH yyyy", "05 JANUARY 2021"},
      {"wkd d mon yy", "tue 5 jan 21"},
  };
  REQUIRE(date_formats().size() == want.size());
  CHECK(date_formats().size() >= 10);
  for (size_t f = 0; f < want.size(); ++f) {
    CHECK(date_formats()[f] == want[f].first);
    CHECK(write_date(d, f) == want[f].second);
  }
  CHECK(iso_date(d) == "2021-01-05");
  CHECK(iso_date({1950, 12, 31}) == "1950-12-31");
  // Ordinals and weekdays.
  const std::vector<std::pair<int, std::string>> ordinals = {{1, "1st"},   {2, "2nd"},   {3, "3rd"},  {4, "4th"},
                                                              {11, "11th"}, {12, "12th"}, {13, "13th"}, {21, "21st"},
                                                              {22, "22nd"}, {23, "23rd"}, {30, "30th"}, {31, "31st"}};
  for (const auto& [day, text] : ordinals)
    CHECK(write_date({2021, 1, day}, 3) == "January " + text + ", 2021");
  CHECK(write_date({1950, 1, 1}, 7) == "Sunday, January 1, 1950");
  CHECK(write_date({2049, 12, 31}, 7) == "Friday, December 31, 2049");
  CHECK(write_date({1969, 12, 31}, 16) == "wed 31 dec 69");
  CHECK(error_of([&] { write_date(d, 17); }) == "dates: format 17 is out of range (there are 17)");
  CHECK(error_of([&] { write_date({2021, 13, 1}, 0); }) == "dates: 2021-13-1 is not a date");
}

TEST_CASE("tasks: every written date has one reading (no source maps to two dates)") {
  // Every day of 1950-2049 in every format: 36,525 x 17 sources.
  std::unordered_map<std::string, std::string> reading;
  int64_t count = 0;
  for (int y = 1950; y <= 2049; ++y)
    for (int m = 1; m <= 12; ++m) {
      static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
      const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
      for (int dd = 1; dd <= days[m - 1] + (m == 2 && leap); ++dd) {
        const std::string iso = iso_date({y, m, dd});
        for (size_t f = 0; f < date_formats().size(); ++f) {
          auto [it, added] = reading.emplace(write_date({y, m, dd}, f), iso);
          if (!added && it->second != iso) FAIL("\"" << it->first << "\" reads as " << it->second << " and " << iso);
          ++count;
        }
      }
    }
  CHECK(count == 36525 * 17);
}

TEST_CASE("tasks: dates sets use their vocabularies fully and only") {
  TaskOptions o;
  o.name = "dates";
  o.train_size = 3000;
  o.valid_size = 300;
  o.seed = 2;
  TaskData d = make_task(o);
  CHECK(d.train.src_tokenizer == Tokenizer::Char);
  CHECK(d.tgt_vocab.tokens() == Tokens{"<pad>", "<bos>", "<eos>", "<unk>", "-", "0", "1", "2", "3", "4", "5", "6", "7",
                                       "8", "9"});
  CHECK(d.src_vocab.token(4) == " ");
  std::set<std::string> formats_seen;
  std::set<std::string> years;
  for (const Corpus* c : {&d.train, &d.valid}) {
    EncodedCorpus e = encode(*c, d.src_vocab, d.tgt_vocab);
    CHECK(e.unknown_src == 0);
    CHECK(e.unknown_tgt == 0);
    for (const auto& ex : c->examples) {
      const std::string iso = join_tokens(ex.tgt, Tokenizer::Char);
      REQUIRE(iso.size() == 10);
      years.insert(iso.substr(0, 4));
      const Date date{std::stoi(iso.substr(0, 4)), std::stoi(iso.substr(5, 2)), std::stoi(iso.substr(8, 2))};
      REQUIRE((date.year >= 1950 && date.year <= 2049));
      const std::string src = join_tokens(ex.src, Tokenizer::Char);
      bool found = false;
      for (size_t f = 0; f < date_formats().size() && !found; ++f)
        if (write_date(date, f) == src) {
          found = true;
          formats_seen.insert(date_formats()[f]);
        }
      REQUIRE_MESSAGE(found, src << " -> " << iso);
    }
  }
  CHECK(formats_seen.size() == date_formats().size());
  CHECK(years.size() == 100);
}

// ---------------------------------------------------------------------------------------------------------
// Batching

namespace {
EncodedCorpus small_corpus() {
  EncodedCorpus c;
  c.src = {{5, 6}, {7, 8, 9, 10}, {11}, {12, 13, 14}, {15, 16}};
  c.tgt = {{20, 21, 22}, {23}, {24, 25}, {26}, {27, 28, 29, 30}};
  return c;
}
}  // namespace

TEST_CASE("batch: padding, teacher-forcing inputs and outputs, lengths") {
  EncodedCorpus c = small_corpus();
  Batch b = make_batch(c, {0, 1, 2}, false);
  CHECK(b.N == 3);
  CHECK(b.S == 4);
  CHECK(b.T == 4);  // the longest target (3) + 1
  CHECK(b.src == Ids{5, 6, 0, 0, /**/ 7, 8, 9, 10, /**/ 11, 0, 0, 0});
  CHECK(b.src_lengths == Ids{2, 4, 1});
  CHECK(b.tgt_in == Ids{1, 20, 21, 22, /**/ 1, 23, 0, 0, /**/ 1, 24, 25, 0});
  CHECK(b.tgt_out == Ids{20, 21, 22, 2, /**/ 23, 2, 0, 0, /**/ 24, 25, 2, 0});
  CHECK(b.tgt_lengths == Ids{4, 2, 3});
  CHECK(b.index == Ids{0, 1, 2});
  CHECK(b.target_tokens() == 9);
  // Sorted by source length, longest first; ties keep their order; index keeps the permutation.
  Batch s = make_batch(c, {0, 2, 4, 1}, true);
  CHECK(s.index == Ids{1, 0, 4, 2});
  CHECK(s.src_lengths == Ids{4, 2, 2, 1});
  CHECK(s.src == Ids{7, 8, 9, 10, /**/ 5, 6, 0, 0, /**/ 15, 16, 0, 0, /**/ 11, 0, 0, 0});
  CHECK(s.tgt_out == Ids{23, 2, 0, 0, 0, /**/ 20, 21, 22, 2, 0, /**/ 27, 28, 29, 30, 2, /**/ 24, 25, 2, 0, 0});
  CHECK(error_of([&] { make_batch(c, {}, false); }) == "batch: no rows");
  CHECK(error_of([&] { make_batch(c, {5}, false); }) == "batch: example 5 is out of range (the data set has 5)");
  EncodedCorpus bad = c;
  bad.tgt[1].clear();
  CHECK(error_of([&] { make_batch(bad, {1}, false); }) == "batch: example 1 has an empty target");
  std::vector<Batch> all = batches_in_order(c, 2, false);
  REQUIRE(all.size() == 3);
  CHECK(all[2].index == Ids{4});
  CHECK(all[1].index == Ids{2, 3});
}

TEST_CASE("batcher: each epoch visits every example once, in an order fixed by seed and epoch") {
  EncodedCorpus c;
  for (int64_t i = 0; i < 23; ++i) {
    c.src.push_back(Ids(static_cast<size_t>(1 + i % 5), 4 + i));
    c.tgt.push_back(Ids{4 + i});
  }
  BatcherOptions o;
  o.batch_size = 5;
  o.seed = 99;
  Batcher b(c, o);
  CHECK(b.batches_per_epoch() == 5);
  std::vector<Ids> orders;
  for (int e = 0; e < 3; ++e) {
    Ids seen;
    for (int k = 0; k < 5; ++k) {
      if (k > 0) CHECK_FALSE(b.at_epoch_end());  // at k == 0 the last epoch's end still stands (e > 0)
      Batch batch = b.next();
      CHECK(batch.epoch == e);
      CHECK(batch.N == (k < 4 ? 5 : 3));
      seen.insert(seen.end(), batch.index.begin(), batch.index.end());
    }
    CHECK(b.at_epoch_end());
    CHECK(seen == b.epoch_order(e));
    Ids sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    Ids all(23);
    std::iota(all.begin(), all.end(), 0);
    CHECK(sorted == all);
    orders.push_back(seen);
  }
  CHECK(orders[0] != orders[1]);
  CHECK(orders[1] != orders[2]);
  CHECK(b.epoch() == 2);
  CHECK(b.position() == 23);
  CHECK(b.next().epoch == 3);
  // Another seed, another order; no shuffle, the natural order.
  o.seed = 100;
  CHECK(Batcher(c, o).epoch_order(0) != orders[0]);
  o.shuffle = false;
  Batcher plain(c, o);
  CHECK(plain.next().index == Ids{0, 1, 2, 3, 4});
  CHECK(plain.epoch_order(7)[22] == 22);
  // drop_last skips the 3 left over.
  o.shuffle = true;
  o.drop_last = true;
  Batcher dl(c, o);
  CHECK(dl.batches_per_epoch() == 4);
  for (int k = 0; k < 4; ++k) CHECK(dl.next().epoch == 0);
  CHECK(dl.at_epoch_end());
  CHECK(dl.position() == 20);
  Batch next = dl.next();
  CHECK(next.epoch == 1);
  CHECK(next.N == 5);
  // Sorting within batches keeps each batch's examples.
  o.drop_last = false;
  o.sort_by_length = true;
  Batcher sorted(c, o);
  Batch sb = sorted.next();
  Ids order0 = Batcher(c, o).epoch_order(0);
  Ids members(sb.index);
  std::sort(members.begin(), members.end());
  Ids expect(order0.begin(), order0.begin() + 5);
  std::sort(expect.begin(), expect.end());
  CHECK(members == expect);
  for (int64_t r = 1; r < sb.N; ++r) CHECK(sb.src_lengths[r - 1] >= sb.src_lengths[r]);
}

TEST_CASE("batcher: maxi-batches hold examples of about one length, shuffled as whole batches") {
  EncodedCorpus c;
  for (int64_t i = 0; i < 103; ++i) {
    c.src.push_back(Ids(static_cast<size_t>(1 + (i * 37) % 19), 4));
    c.tgt.push_back(Ids(static_cast<size_t>(1 + (i * 11) % 7), 5));
  }
  BatcherOptions o;
  o.batch_size = 5;
  o.seed = 7;
  const Ids shuffled = Batcher(c, o).epoch_order(2);
  o.maxi_batch = 4;
  const Batcher mb(c, o);
  const Ids order = mb.epoch_order(2);
  // The plain shuffle, sorted by (source length, target length) in windows of 4 batches (20 examples).
  Ids windows = shuffled;
  for (size_t start = 0; start < windows.size(); start += 20)
    std::stable_sort(windows.begin() + long(start), windows.begin() + long(std::min(windows.size(), start + 20)),
                     [&](int64_t a, int64_t b) {
                       return c.src[size_t(a)].size() != c.src[size_t(b)].size()
                                  ? c.src[size_t(a)].size() < c.src[size_t(b)].size()
                                  : c.tgt[size_t(a)].size() < c.tgt[size_t(b)].size();
                     });
  // The 20 full batches are those of the sorted windows, in another order; the 3 left over come last.
  std::vector<Ids> expect, got;
  for (size_t b = 0; b < 20; ++b) {
    expect.emplace_back(windows.begin() + long(5 * b), windows.begin() + long(5 * b + 5));
    got.emplace_back(order.begin() + long(5 * b), order.begin() + long(5 * b + 5));
  }
  CHECK(got != expect);
  std::vector<Ids> got_sorted = got, expect_sorted = expect;
  std::sort(got_sorted.begin(), got_sorted.end());
  std::sort(expect_sorted.begin(), expect_sorted.end());
  CHECK(got_sorted == expect_sorted);
  CHECK(Ids(order.begin() + 100, order.end()) == Ids(windows.begin() + 100, windows.end()));
  // Less padding than the plain shuffle's batches: sum over batches of rows * longest source - the sources.
  auto padding = [&](const Ids& ord) {
    int64_t pad = 0;
    for (size_t start = 0; start < ord.size(); start += 5) {
      size_t longest = 0, sum = 0, rows = 0;
      for (size_t k = start; k < std::min(ord.size(), start + 5); ++k, ++rows) {
        longest = std::max(longest, c.src[size_t(ord[k])].size());
        sum += c.src[size_t(ord[k])].size();
      }
      pad += int64_t(rows * longest - sum);
    }
    return pad;
  };
  CHECK(padding(order) * 2 < padding(shuffled));
  // A function of (seed, epoch); the batches handed out are the order's; 1 is the plain shuffle.
  CHECK(Batcher(c, o).epoch_order(2) == order);
  CHECK(mb.epoch_order(3) != order);
  Batcher walk(c, o);
  Ids seen;
  for (int k = 0; k < 21 * 3; ++k) {
    Batch b = walk.next();
    if (b.epoch == 2) seen.insert(seen.end(), b.index.begin(), b.index.end());
  }
  CHECK(seen == order);
  o.maxi_batch = 1;
  CHECK(Batcher(c, o).epoch_order(2) == shuffled);
  // A window larger than the data set: one window.
  o.maxi_batch = 1000;
  const Ids one = Batcher(c, o).epoch_order(0);
  Ids all = one;
  std::sort(all.begin(), all.end());
  Ids expect_all(103);
  std::iota(expect_all.begin(), expect_all.end(), 0);
  CHECK(all == expect_all);
  o.maxi_batch = -1;
  CHECK(error_of([&] { Batcher(c, o); }) == "batcher: the maxi-batch must be in [0, 1048576] batches, got -1");
}

TEST_CASE("batcher: resuming from a saved state gives the same next batches") {
  EncodedCorpus c;
  for (int64_t i = 0; i < 17; ++i) {
    c.src.push_back(Ids(static_cast<size_t>(1 + (i * 7) % 6), 4 + i));
    c.tgt.push_back(Ids(static_cast<size_t>(1 + i % 3), 5 + i));
  }
  BatcherOptions o;
  o.batch_size = 4;
  o.sort_by_length = true;
  o.seed = 0xFFFFFFFFFFFFFFF1ULL;  // does not fit a float: stored as a string
  for (int stop : {0, 3, 5, 9}) {   // 5 batches per epoch: stop mid-epoch, at the boundary, later
    Batcher a(c, o);
    for (int k = 0; k < stop; ++k) a.next();
    const std::string saved = io::to_json(a.state_value());
    std::vector<Batch> uninterrupted;
    for (int k = 0; k < 8; ++k) uninterrupted.push_back(a.next());

    BatcherOptions other = o;
    other.seed = 1;  // the saved seed wins
    Batcher b(c, other);
    b.load_state(io::parse_json(saved, "ckpt.json"), "ckpt.json: data_order");
    CHECK(b.state().seed == o.seed);
    for (int k = 0; k < 8; ++k) {
      Batch x = b.next();
      CHECK(x.index == uninterrupted[k].index);
      CHECK(x.src == uninterrupted[k].src);
      CHECK(x.tgt_out == uninterrupted[k].tgt_out);
      CHECK(x.epoch == uninterrupted[k].epoch);
    }
  }
  Batcher a(c, o);
  a.next();
  CHECK(io::to_json(a.state_value()) ==
        R"({"seed":"18446744073709551601","epoch":"0","position":"4","examples":"17"})");
}

TEST_CASE("batcher: bad options and bad saved states") {
  EncodedCorpus c = small_corpus();
  BatcherOptions o;
  o.batch_size = 0;
  CHECK(error_of([&] { Batcher(c, o); }) == "batcher: the batch size must be >= 1, got 0");
  o.batch_size = 6;
  o.drop_last = true;
  CHECK(error_of([&] { Batcher(c, o); }) ==
        "batcher: with drop_last, the batch size 6 must not exceed the data set's 5 examples");
  CHECK(error_of([&] { Batcher(EncodedCorpus{}, BatcherOptions{}); }) == "batcher: the data set is empty");
  Batcher b(c, BatcherOptions{});
  auto load = [&](const std::string& json) {
    return error_of([&] { b.load_state(io::parse_json(json, "m.json"), "m.json: data_order"); });
  };
  CHECK(load(R"({"seed": "1", "epoch": "0", "position": "0", "examples": "5"})") == "");
  CHECK(load(R"({"seed": "1", "epoch": "0", "position": "0", "examples": "6"})") ==
        "m.json: data_order: batcher: the saved data order is for 6 examples, but the data set has 5 (the data "
        "changed)");
  CHECK(load(R"({"seed": "1", "epoch": "2", "position": "6", "examples": "5"})") ==
        "m.json: data_order: batcher: the saved position 6 (epoch 2) is outside the data set's 5 examples");
  CHECK(load(R"({"seed": "1", "epoch": "0", "position": "0"})") == "m.json: data_order: the data order has no \"examples\"");
  CHECK(load(R"({"seed": 1, "epoch": "0", "position": "0", "examples": "5"})") ==
        "m.json: data_order: \"seed\" must be an integer written as a string (\"12\")");
  CHECK(load(R"({"seed": "-1", "epoch": "0", "position": "0", "examples": "5"})") ==
        "m.json: data_order: \"seed\" is \"-1\", not a non-negative integer");
  CHECK(load(R"({"seed": "1", "epoch": "0x", "position": "0", "examples": "5"})") ==
        "m.json: data_order: \"epoch\" is \"0x\", not a non-negative integer");
  CHECK(load(R"({"seed": "99999999999999999999", "epoch": "0", "position": "0", "examples": "5"})") ==
        "m.json: data_order: \"seed\" is \"99999999999999999999\", not a non-negative integer");
  CHECK(load("[1]") ==
        "m.json: data_order: the data order must be an object {\"seed\", \"epoch\", \"position\", \"examples\"}");
}

// ---------------------------------------------------------------------------------------------------------
// Metrics

namespace {
// The full (m+1) x (n+1) table, the textbook way.
int64_t levenshtein_table(const Ids& a, const Ids& b) {
  std::vector<std::vector<int64_t>> d(a.size() + 1, std::vector<int64_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = static_cast<int64_t>(i);
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j)
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
  return d[a.size()][b.size()];
}
}  // namespace

TEST_CASE("metrics: edit distance") {
  CHECK(edit_distance(tokenize("kitten", Tokenizer::Char), tokenize("sitting", Tokenizer::Char)) == 3);
  CHECK(edit_distance(tokenize("flaw", Tokenizer::Char), tokenize("lawn", Tokenizer::Char)) == 2);
  CHECK(edit_distance(Tokens{}, Tokens{"a", "b"}) == 2);
  CHECK(edit_distance(Tokens{"a", "b"}, Tokens{}) == 2);
  CHECK(edit_distance(Tokens{}, Tokens{}) == 0);
  CHECK(edit_distance(Tokens{"hh", "ax", "l", "ow"}, Tokens{"hh", "eh", "l", "ow"}) == 1);
  CHECK(edit_distance(Ids{1, 2, 3}, Ids{3, 2, 1}) == 2);
  Rng rng(3);
  for (int k = 0; k < 300; ++k) {
    Ids a(uniform_below(rng, 9)), b(uniform_below(rng, 9));
    for (auto& x : a) x = uniform_below(rng, 3);
    for (auto& x : b) x = uniform_below(rng, 3);
    REQUIRE(edit_distance(a, b) == levenshtein_table(a, b));
    REQUIRE(edit_distance(b, a) == edit_distance(a, b));
  }
}

TEST_CASE("metrics: phoneme and word error rates against several references") {
  ErrorRates r;
  CHECK(r.word_error_rate() == 0.0);
  CHECK(r.token_error_rate() == 0.0);
  // "record": right if it matches either pronunciation.
  r.add(Tokens{"r", "ax", "k", "ao", "r", "d"}, {{"r", "eh", "k", "er", "d"}, {"r", "ax", "k", "ao", "r", "d"}});
  // one substitution from the closer reference (length 4), 2 from the other (length 3)
  r.add(Tokens{"hh", "eh", "l", "ow"}, {{"hh", "ax", "l", "ow"}, {"hh", "l", "ow"}});
  // ties go to the earlier reference: distance 1 to both, the first has length 2
  r.add(Tokens{"a"}, {{"a", "b"}, {"c"}});
  CHECK(r.words() == 3);
  CHECK(r.wrong_words() == 2);
  CHECK(r.edits() == 2);
  CHECK(r.reference_tokens() == 6 + 4 + 2);
  CHECK(r.token_error_rate() == doctest::Approx(2.0 / 12.0));
  CHECK(r.word_error_rate() == doctest::Approx(2.0 / 3.0));
  CHECK(r.exact_match() == doctest::Approx(1.0 / 3.0));
  ErrorRates ids;
  ids.add(Ids{4, 5}, {{4, 5, 6}, {4, 5}});
  ids.add(Ids{}, {{7, 8}});
  CHECK(ids.wrong_words() == 1);
  CHECK(ids.edits() == 2);
  CHECK(ids.reference_tokens() == 4);
  CHECK(ids.token_error_rate() == 0.5);
  CHECK(error_of([&] { r.add(Tokens{"a"}, {}); }) == "error rates: a word has no reference");
}

TEST_CASE("metrics: token accuracy and exact match ignore padding") {
  // targets as a batch's tgt_out: [N=3, T=4]
  const Ids target = {20, 21, 2, 0, /**/ 22, 2, 0, 0, /**/ 23, 24, 25, 2};
  const Ids predicted = {20, 21, 2, 9, /**/ 22, 5, 7, 7, /**/ 23, 24, 25, 2};  // pads ignored; row 1 wrong at <eos>
  TokenAccuracy acc;
  acc.add(predicted, target, 3, 4);
  CHECK(acc.tokens == 9);
  CHECK(acc.correct_tokens == 8);
  CHECK(acc.rows == 3);
  CHECK(acc.correct_rows == 2);
  CHECK(acc.accuracy() == doctest::Approx(8.0 / 9.0));
  CHECK(acc.exact_match() == doctest::Approx(2.0 / 3.0));
  acc.add(target, target, 3, 4);
  CHECK(acc.tokens == 18);
  CHECK(acc.correct_rows == 5);
  CHECK(TokenAccuracy{}.accuracy() == 0.0);
  CHECK(error_of([&] { acc.add(predicted, target, 3, 3); }) ==
        "token accuracy: predictions (12 ids) and targets (12 ids) must both be [N, T] = [3, 3]");
}
