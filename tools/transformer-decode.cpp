// transformer-decode: decode with a seq2seq-train checkpoint (recurrent or Transformer): greedy, beam or
// sampling, results streamed one JSON line per source (docs/transformer-decode.md).
#include <algorithm>
#include <iostream>

#include <unistd.h>

#include "attnkit/decode/ensemble.hpp"
#include "attnkit/decode/loader.hpp"
#include "attnkit/decode/records.hpp"
#include "attnkit/decode/search.hpp"
#include "attnkit/models/transformer_lm.hpp"
#include "attnkit/tensor/threads.hpp"
#include "common/common.hpp"

using namespace attnkit;
using attnkit::tools::UsageError;

int main(int argc, char** argv) {
  CLI::App app{"", "transformer-decode"};
  tools::describe(
      app,
      "Decode sources with a seq2seq-train checkpoint.\n"
      "Decode sources with a seq2seq-train checkpoint: --src TEXT, or one source per line (text, or NDJSON "
      "{\"src\": ...}) on standard input, decoded --batch at a time; one JSON line per source: tokens, text, score "
      "(the sum of the log-probabilities, <eos> included). Beam hypotheses are ranked by GNMT's "
      "score / ((5 + len) / 6)^ALPHA (--length-penalty ALPHA, len = output tokens without <eos>). "
      "(docs/transformer-decode.md)",
      "  seq2seq-train --task reverse --model lstm --attention dot --hidden 32 --embed 16 --steps 300 --lr 0.01 --threads 1 "
      "--save model.json\n"
      "  transformer-decode model.json --src '1 2 3'\n"
      "  printf '1 2 3\\n4 5\\n' | transformer-decode model.json --strategy beam --beam 4 --n-best 2\n"
      "  echo '{\"src\": \"3 1 4\"}' | transformer-decode model.json --strategy sample --top-p 0.9 --seed 7\n"
      "  transformer-decode model.json --src '1 2 3' --attention --heatmap align.svg\n"
      "  printf 'to be or not to be, that is the question\\n%.0s' 1 2 3 4 5 6 > text.txt\n"
      "  seq2seq-train --model transformer-lm --train text.txt --context 16 --layers 1 --d-model 32 --heads 2 --ff 64 \\\n"
      "      --steps 20 --lr 0.003 --save lm.json\n"
      "  transformer-decode lm.json --prompt 'to be' --max-new-tokens 10 --strategy sample --temperature 0.8\n");
  std::string model_path, src, strategy = "greedy", input_format = "auto", heatmap;
  tools::OutputOptions out;
  int64_t batch = 32, beam = 4, n_best = 1, max_len = 0, min_len = 0, top_k = 0;
  double length_penalty = 0, temperature = 1, top_p = 1;
  uint64_t seed = 1;
  bool no_cache = false, attention = false;
  int attention_layer = -1, attention_head = -1, threads = 0;
  std::string weights_path;
  app.add_option("model", model_path, "Checkpoint written by seq2seq-train (.json, .safetensors, .npz), or with --weights a model config")
      ->required()
      ->type_name("MODEL.json");
  app.add_option("--weights", weights_path, "A state_dict (e.g. exported from PyTorch; JSON, .safetensors or .npz by extension); MODEL.json is then its config "
                                            "(family, sizes, vocab, tokenizers: docs/transformer-decode.md)")
      ->type_name("STATE_DICT.json");
  auto* src_opt = app.add_option("--src", src, "One source text (instead of standard input)");
  std::string prompt;
  int64_t max_new_tokens = 200;
  auto* prompt_opt = app.add_option("--prompt", prompt, "A language model: the text to continue (instead of one "
                                                        "prompt per line on standard input)");
  auto* new_opt = app.add_option("--max-new-tokens", max_new_tokens, "A language model: tokens generated per prompt")
                      ->transform(tools::positive())
                      ->capture_default_str();
  app.add_option("--input", input_format, "Standard input: text lines, NDJSON {\"src\": ...} records, or auto "
                                          "(NDJSON when the first line starts with '{')")
      ->check(CLI::IsMember({"auto", "text", "ndjson"}))
      ->capture_default_str();
  app.add_option("--batch", batch, "Sources decoded together; each batch's results are written when it is done")
      ->transform(tools::positive())
      ->capture_default_str();
  app.add_option("--strategy", strategy, "Search")->check(CLI::IsMember({"greedy", "beam", "sample"}))->capture_default_str();
  auto* beam_opt = app.add_option("--beam", beam, "Beam: hypotheses kept per source")->transform(tools::positive())->capture_default_str();
  auto* lp_opt = app.add_option("--length-penalty", length_penalty,
                                "Beam: GNMT alpha; hypotheses ranked by score / ((5 + len) / 6)^alpha")
                     ->transform(tools::non_negative())
                     ->capture_default_str();
  auto* nbest_opt = app.add_option("--n-best", n_best, "Beam: the K best hypotheses (<= --beam); sample: K samples, "
                                                       "best first; written as \"n_best\"")
                        ->transform(tools::positive());
  app.add_option("--max-len", max_len, "Output tokens at most (default: 2 x source length + 10)")->transform(tools::positive());
  app.add_option("--min-len", min_len, "No <eos> before this many tokens (every strategy)")->transform(tools::non_negative());
  auto* temp_opt = app.add_option("--temperature", temperature, "Sample: p ~ exp(log p / T)")
                       ->check(CLI::Validator(
                           [](std::string& s) -> std::string {
                             try {
                               const double x = std::stod(s);
                               if (x > 0 && x < 1e30) return "";
                             } catch (...) {
                             }
                             return s + " is not a number > 0 and < 1e30";
                           },
                           "T > 0"));
  auto* topk_opt = app.add_option("--top-k", top_k, "Sample: only the K most likely tokens")->transform(tools::positive());
  auto* topp_opt = app.add_option("--top-p", top_p, "Sample: only the most likely tokens whose probability reaches P")
                       ->check(CLI::Validator(
                           [](std::string& s) -> std::string {
                             try {
                               const double x = std::stod(s);
                               if (x > 0 && x <= 1) return "";
                             } catch (...) {
                             }
                             return s + " is not in (0, 1]";
                           },
                           "P in (0, 1]"));
  auto* seed_opt = app.add_option("--seed", seed, "Sample: seed (the same seed gives the same samples)")
                      ->transform(tools::non_negative())
                      ->capture_default_str();
  app.add_flag("--no-cache", no_cache, "Recompute the whole prefix at every step (the slow reference)");
  auto* att_opt = app.add_flag("--attention", attention, "Add each output step's cross-attention weights (\"attention\"); a language model's: its "
                                 "self-attention over the prompt and the text so far");
  auto* layer_opt = app.add_option("--attention-layer", attention_layer, "Attention layer (-1: the last)")->capture_default_str();
  auto* head_opt = app.add_option("--attention-head", attention_head, "Attention head (-1: the mean over heads)")->capture_default_str();
  auto* heatmap_opt = app.add_option("--heatmap", heatmap, "Draw the alignment as SVG; {n} in the name: one file per "
                                                           "source (1, 2, ...), else only one source is accepted")
                          ->type_name("FILE.svg");
  app.add_option("-o,--output", out.path, "Write the results to FILE (atomically) instead of standard output")
      ->type_name("FILE");
  std::string spm_model_path;
  app.add_option("--spm-model", spm_model_path, "A SentencePiece model that must be the one stored in the checkpoint "
                                                "(refused, naming both, when it differs)")
      ->type_name("FILE.model");
  tools::add_threads_option(app, threads);
  tools::PrecisionOptions precision;
  tools::add_precision_options(app, precision);
  std::string save_quantized;
  tools::add_save_quantized_option(app, save_quantized);
  std::vector<std::string> ensemble_paths;
  tools::add_models_option(app, "--ensemble", ensemble_paths,
                           "An encoder-decoder: decode MODEL and these checkpoints together (repeatable), on the "
                           "mean of their next-token distributions; same tokenizers and vocabularies");
  tools::RescoreOptions rescore;
  tools::add_rescore_options(app, rescore);

  // A language model: each prompt continued by --max-new-tokens tokens; on a terminal (no -o) with one output
  // per prompt the text is written as it is produced, else one JSON line per prompt.
  auto generate = [&](const decode::LoadedModel& model, decode::SearchOptions o) -> int {
    for (const char* name : {"--src", "--max-len", "--heatmap", "--batch", "--input"})
      if (app.get_option(name)->count() > 0)
        throw UsageError(std::string(name) + " does not apply to a language model (--prompt, --max-new-tokens)");
    o.max_len = max_new_tokens;
    o.min_len = max_new_tokens;  // <eos> never chosen: text goes on until --max-new-tokens
    const auto* lm = dynamic_cast<const models::TransformerLM*>(model.model.get());
    const int64_t context = lm && lm->config().positional == nn::PositionalKind::Learned ? lm->config().max_positions : 0;
    bool said_window = false;
    const bool stream = (out.path.empty() || out.path == "-") && isatty(STDOUT_FILENO) && !attention &&
                        (o.strategy == decode::Strategy::Greedy || (o.strategy == decode::Strategy::Sample && n_best == 1));
    tools::Output output(out);
    decode::OutputFields fields;
    fields.normalized = o.length_penalty != 0;
    fields.n_best = n_best > 1;
    fields.attention = attention;
    int64_t index = 0, unknown = 0;
    auto one = [&](const std::string& text, const std::string& where) {
      std::vector<int64_t> ids;
      int64_t u = 0;
      try {
        ids = decode::encode_source(model, text, &u);
        AK_CHECK(int64_t(ids.size()) + max_new_tokens <= decode::kMaxTokens,
                 "the prompt's {} tokens and --max-new-tokens {} are more than {} tokens", ids.size(),
                 max_new_tokens, decode::kMaxTokens);
      } catch (const Error& e) {
        throw Error(where + ": " + e.what());
      }
      unknown += u;
      if (context > 0 && int64_t(ids.size()) + max_new_tokens > context && !said_window) {
        std::cerr << fmt::format("transformer-decode: {}: {} prompt tokens and {} new ones are more than the model's "
                                 "context of {}: past it each token is predicted from the last {} (the window "
                                 "recomputed at every token, slower than the cache)\n",
                                 where, ids.size(), max_new_tokens, context, context);
        said_window = true;
      }
      std::vector<int64_t> produced;  // spm: a piece's text depends on the one before (a line's first "▁")
      std::string shown;
      if (stream) {
        std::cout << text << std::flush;
        o.on_token = [&](int64_t, int64_t token) {
          if (!model.tgt_spm) {
            std::cout << decode::target_text(model, decode::target_tokens(model, {token})) << std::flush;
            return;
          }
          produced.push_back(token);
          const std::string all = decode::target_text(model, decode::target_tokens(model, produced));
          std::cout << all.substr(std::min(shown.size(), all.size())) << std::flush;
          shown = all;
        };
      }
      const auto results = decode::search(*model.model, {ids}, o, index++);
      if (stream) std::cout << std::endl;
      else output.write(decode::result_json(model, results[0], fields));
    };
    if (prompt_opt->count() > 0) {
      one(prompt, "--prompt");
    } else {
      decode::StdinBuffer in_buf;
      std::istream in(&in_buf);
      decode::SourceReader reader(in, decode::InputFormat::Text, "standard input");
      std::string text;
      while (reader.next(text)) one(text, fmt::format("standard input: line {}", reader.line()));
    }
    output.commit();
    if (unknown > 0)
      std::cerr << fmt::format("transformer-decode: warning: {} prompt token(s) outside the vocabulary read as <unk>\n",
                               unknown);
    return 0;
  };

  return tools::run(app, argc, argv, [&]() -> int {
    decode::SearchOptions o;
    o.strategy = decode::parse_strategy(strategy);
    auto refuse = [&](CLI::Option* opt, const char* why) {
      if (opt->count() > 0) throw UsageError(opt->get_name() + " " + why);
    };
    if (o.strategy != decode::Strategy::Beam) {
      refuse(beam_opt, "goes with --strategy beam");
      if (o.strategy == decode::Strategy::Greedy) refuse(nbest_opt, "goes with --strategy beam or sample");
      refuse(lp_opt, "goes with --strategy beam");
    }
    if (o.strategy != decode::Strategy::Sample)
      for (CLI::Option* opt : {temp_opt, topk_opt, topp_opt, seed_opt}) refuse(opt, "goes with --strategy sample");
    if (att_opt->count() == 0 && heatmap_opt->count() == 0) {
      refuse(layer_opt, "goes with --attention or --heatmap");
      refuse(head_opt, "goes with --attention or --heatmap");
    }
    rescore.check(o.strategy == decode::Strategy::Beam);
    if (rescore.union_beams && (att_opt->count() > 0 || heatmap_opt->count() > 0))
      throw UsageError(std::string(att_opt->count() > 0 ? "--attention" : "--heatmap") +
                       " shows the search model's attention: not with --rescore-union (other models' hypotheses join)");
    if (o.strategy == decode::Strategy::Beam && n_best > beam)
      throw UsageError(fmt::format("--n-best {} is more than --beam {}", n_best, beam));
    auto at_most = [](const char* name, int64_t value, int64_t limit) {
      if (value > limit) throw UsageError(fmt::format("{} {} is more than the maximum {}", name, value, limit));
    };
    at_most("--beam", beam, decode::kMaxRowsPerSource);
    at_most("--n-best", n_best, decode::kMaxRowsPerSource);
    at_most("--max-len", max_len, decode::kMaxTokens);
    at_most("--min-len", min_len, decode::kMaxTokens);
    if (max_len > 0 && min_len > max_len)
      throw UsageError(fmt::format("--min-len {} is more than --max-len {}", min_len, max_len));
    if (src_opt->count() > 0 && app.get_option("--input")->count() > 0) throw UsageError("--input goes with standard input, not --src");
    o.beam = beam;
    o.length_penalty = length_penalty;
    o.n_best = rescore.any() ? beam : n_best;  // rescoring reranks the whole beam; the best --n-best written
    o.max_len = max_len;
    o.min_len = min_len;
    o.temperature = temperature;
    o.top_k = top_k;
    o.top_p = top_p;
    o.seed = seed;
    o.use_cache = !no_cache;
    o.attention = attention || !heatmap.empty();
    o.attention_layer = attention_layer;
    o.attention_head = attention_head;
    o.validate();
    set_num_threads(threads);
    nn::PrecisionPlan plan = tools::precision_plan(precision);
    tools::check_save_quantized(save_quantized, precision);

    // (the loaders' messages name the files)
    const decode::LoadedModel model =
        weights_path.empty() ? decode::load_checkpoint(model_path) : decode::load_exported(model_path, weights_path);
    if (!spm_model_path.empty()) {
      if (!model.src_spm)
        throw UsageError(fmt::format("--spm-model: {} does not use SentencePiece (its tokenizer is {})", model_path,
                                     models::tokenizer_name(model.src_tokenizer)));
      models::check_same_spm(*model.src_spm, model_path, models::SpmModel::read_file(spm_model_path), spm_model_path);
    }
    decode::use_special_ids(model, o);  // an exported model's specials may sit anywhere in its vocabularies
    tools::use_stored_weights(plan, model.stored, model_path, "transformer-decode");
    model.model->set_precision(plan);
    tools::report_precision(plan, "transformer-decode");
    if (!save_quantized.empty()) {
      decode::save_quantized(model, plan, save_quantized);
      if (src_opt->count() + prompt_opt->count() == 0) {  // nothing to decode but standard input: not read
        std::cerr << "transformer-decode: wrote " << save_quantized << "; no --src or --prompt, nothing decoded\n";
        return 0;
      }
    }
    // --ensemble: the other checkpoints, each lowered as MODEL is; the search then decodes with them all
    std::vector<decode::LoadedModel> others;
    std::vector<const decode::LoadedModel*> loaded{&model};
    std::vector<models::TranslationModel*> members{model.model.get()};
    if (!ensemble_paths.empty()) {
      if (!weights_path.empty()) throw UsageError("--ensemble goes with checkpoints, not with --weights");
      if (!save_quantized.empty()) throw UsageError("--save-quantized writes one model: not with --ensemble");
      if (!model.model->has_source())
        throw UsageError("--ensemble goes with encoder-decoders; " + model_path + " is a " + model.family + " model");
      others = tools::load_lowered_checkpoints(ensemble_paths, precision, "transformer-decode");
      for (const decode::LoadedModel& m : others) {
        loaded.push_back(&m);
        members.push_back(m.model.get());
      }
      std::vector<std::string> names{model_path};
      names.insert(names.end(), ensemble_paths.begin(), ensemble_paths.end());
      decode::check_ensemble(loaded, names);
    }
    decode::Ensemble ensemble(members);
    models::Decodable& decoder = members.size() > 1 ? static_cast<models::Decodable&>(ensemble) : *model.model;
    // --rescore, --rescore-inverse: the beam reranked by further checkpoints, each lowered as MODEL is
    tools::Rescoring rescoring;
    if (rescore.any()) {
      if (!save_quantized.empty()) throw UsageError("--save-quantized writes one model: not with --rescore");
      if (!model.model->has_source())
        throw UsageError("--rescore goes with encoder-decoders; " + model_path + " is a " + model.family + " model");
      rescoring = tools::load_rescorers(rescore, model, model_path, precision, "transformer-decode");
    }
    if (model.family == "transformer-lm" || model.family == "recurrent-lm") return generate(model, o);
    if (prompt_opt->count() + new_opt->count() > 0)
      throw UsageError((prompt_opt->count() ? std::string("--prompt") : std::string("--max-new-tokens")) +
                       " goes with a language model (seq2seq-train --model transformer-lm, lstm-lm, ...); " + model_path + " is a " +
                       model.family + " model");
    decode::OutputFields fields;
    fields.normalized = o.length_penalty != 0 || rescore.any();  // rescored: the combined ranking score
    fields.attention = attention;
    fields.n_best = n_best > 1;
    tools::Output output(out);
    int64_t unknown = 0, with_unknown = 0, done = 0;
    // --heatmap without {n} takes one source: the input is decoded at its end, so that a second source is
    // refused before anything is written.
    const bool one_heatmap = !heatmap.empty() && heatmap.find("{n}") == std::string::npos;
    struct Svg {
      std::string path, text;
      decode::Hypothesis best;
    };
    std::vector<Svg> svgs;  // with -o: written once the results are committed
    std::vector<std::string> texts;
    std::vector<std::vector<int64_t>> ids;  // empty for a blank line
    auto flush = [&] {
      std::vector<std::vector<decode::Hypothesis>> results(ids.size());
      for (size_t a = 0; a < ids.size();) {  // each run of non-blank sources, seeded by its index in the input
        if (ids[a].empty()) {
          ++a;
          continue;
        }
        size_t b = a;
        while (b < ids.size() && !ids[b].empty()) ++b;
        const std::vector<std::vector<int64_t>> run(ids.begin() + long(a), ids.begin() + long(b));
        auto r = decode::search(decoder, run, o, done + int64_t(a));
        decode::reading_order(model, r);  // a right-to-left model's outputs turned round
        if (!rescoring.rescorers.empty()) {
          decode::join_beams(r, run, decoder, model.right_left, rescoring.rescorers, o, done + int64_t(a));
          decode::rescore(r, run, rescoring.rescorers, o);
          for (auto& hyps : r) hyps.resize(std::min(hyps.size(), size_t(n_best)));
        }
        std::move(r.begin(), r.end(), results.begin() + long(a));
        a = b;
      }
      for (size_t i = 0; i < results.size(); ++i) {
        ++done;
        if (results[i].empty()) {
          output.write(R"({"tokens":[],"text":"","empty":true})");
          continue;
        }
        if (!heatmap.empty()) {
          std::string path = heatmap;
          for (size_t at = 0; (at = path.find("{n}", at)) != std::string::npos;) {
            path.replace(at, 3, std::to_string(done));
            at += std::to_string(done).size();
          }
          Svg svg{std::move(path), texts[i], results[i][0]};
          if (out.path.empty()) decode::write_alignment_svg(svg.path, model, svg.text, svg.best);
          else svgs.push_back(std::move(svg));
        }
        output.write(decode::result_json(model, results[i], fields));
      }
      texts.clear();
      ids.clear();
    };
    auto add = [&](std::string text, const std::string& where) {
      if (one_heatmap && !texts.empty())
        throw UsageError("--heatmap " + heatmap + " has no {n} in its name, so it takes one source; got a second");
      int64_t u = 0;
      const bool blank = src_opt->count() == 0 && text.empty();  // a blank line: answered with an empty result
      try {
        ids.push_back(blank ? std::vector<int64_t>{} : decode::encode_source(model, text, &u));
      } catch (const Error& e) {
        throw Error(where + ": " + e.what());
      }
      unknown += u;
      with_unknown += u > 0;
      texts.push_back(std::move(text));
      if (!one_heatmap && static_cast<int64_t>(texts.size()) >= batch) flush();
    };
    if (src_opt->count() > 0) {
      add(src, "--src");
    } else {
      decode::StdinBuffer in_buf;
      std::istream in(&in_buf);
      const bool interactive = in_buf.interactive();
      decode::SourceReader reader(in, decode::parse_input_format(input_format), "standard input");
      std::string text;
      while (true) {
        // a terminal or a pipe: what has arrived is answered before waiting for more
        if (interactive && !one_heatmap && !texts.empty() && !in_buf.waiting()) flush();
        if (!reader.next(text)) break;
        add(text, fmt::format("standard input: line {}", reader.line()));
      }
    }
    flush();
    output.commit();
    for (const Svg& svg : svgs) decode::write_alignment_svg(svg.path, model, svg.text, svg.best);
    if (unknown > 0)
      std::cerr << fmt::format("transformer-decode: warning: {} unknown source token(s) mapped to <unk> (in {} of {} "
                               "source(s))\n",
                               unknown, with_unknown, done);
    return 0;
  });
}
