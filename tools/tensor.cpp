// tensor: build, inspect and compare JSON tensors, for building and checking pipelines.
#include <cmath>
#include <iostream>
#include <optional>

#include "attnkit/io/diff.hpp"
#include "attnkit/io/pretty_print.hpp"
#include "attnkit/tensor/compare.hpp"
#include "attnkit/tensor/creation.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/slice.hpp"
#include "common/common.hpp"

using namespace attnkit;
using attnkit::tools::UsageError;

int main(int argc, char** argv) {
  CLI::App app{"", "tensor"};
  tools::describe(app, "Build, inspect and compare JSON tensors (docs/tensor-format.md).",
                  "  tensor linspace -0.4 1.2 --shape 3x4 | tensor show -\n"
                  "  tensor randn --shape 2,5,8 --seed 1 > x.json && tensor randn --shape 1,2,8 --seed 2 > h.json\n"
                  "  tensor pack x=x.json h0=h.json > inputs.json && tensor get inputs.json#x\n"
                  "  tensor get inputs.json#x --index '0,-1' --format flat > out.json\n"
                  "  tensor get x.json --index 0,-1 | tensor diff out.json - --rtol 1e-5 --atol 1e-6\n");
  app.require_subcommand(1);
  app.fallthrough();  // shared options may follow the subcommand: tensor get x.json --format flat
  tools::OutputOptions out;
  tools::InputOptions in;
  tools::add_output_options(app, out);
  tools::add_input_options(app, in);

  // linspace / arange / randn / rand
  double lo = 0, hi = 0;
  std::string shape_text;
  auto* linspace_cmd = app.add_subcommand("linspace", "Evenly spaced values, both ends included (numpy.linspace), reshaped");
  linspace_cmd->add_option("LO", lo, "First value")->required();
  linspace_cmd->add_option("HI", hi, "Last value")->required();
  linspace_cmd->add_option("--shape", shape_text, "Shape, e.g. 3,4 or 3x4; the value count is its product")->required();
  tools::describe(*linspace_cmd, linspace_cmd->get_description(), "  tensor linspace -0.4 1.2 --shape 3x4\n");

  std::vector<double> arange_args;
  auto* arange_cmd = app.add_subcommand("arange", "Values START, START+STEP, ... below STOP (numpy.arange)");
  arange_cmd->add_option("ARGS", arange_args, "STOP, or START STOP, or START STOP STEP (START 0 and STEP 1 by default)")
      ->required()
      ->expected(1, 3)
      ->type_name("NUMBER");
  tools::usage(*arange_cmd, "tensor arange [OPTIONS] [START] STOP [STEP]");
  arange_cmd->add_option("--shape", shape_text, "Reshape the result, e.g. 3,4 or 3x4 (one size may be -1)");
  tools::describe(*arange_cmd, arange_cmd->get_description(), "  tensor arange 0 12 --shape 3,4\n");

  uint64_t seed = 0;
  double mean = 0, std_dev = 1, low = 0, high = 1;
  auto* randn_cmd = app.add_subcommand("randn", "Normal N(mean, std^2) samples from a portable seeded generator");
  randn_cmd->add_option("--shape", shape_text, "Shape, e.g. 2,3 or 2x3")->required();
  randn_cmd->add_option("--seed", seed, "Seed (the same seed gives the same numbers everywhere)")->transform(tools::non_negative())->capture_default_str();
  randn_cmd->add_option("--mean", mean, "Mean")->capture_default_str();
  randn_cmd->add_option("--std", std_dev, "Standard deviation")->capture_default_str();
  tools::describe(*randn_cmd, randn_cmd->get_description(), "  tensor randn --shape 2,3 --seed 7\n");
  auto* rand_cmd = app.add_subcommand("rand", "Uniform [low, high) samples from a portable seeded generator");
  rand_cmd->add_option("--shape", shape_text, "Shape, e.g. 2,3 or 2x3")->required();
  rand_cmd->add_option("--seed", seed, "Seed")->transform(tools::non_negative())->capture_default_str();
  rand_cmd->add_option("--low", low, "Lower bound")->capture_default_str();
  rand_cmd->add_option("--high", high, "Upper bound")->capture_default_str();
  tools::describe(*rand_cmd, rand_cmd->get_description(), "  tensor rand --shape 4 --seed 1 --low -1 --high 1\n");

  // show / get / reshape / transpose
  std::string ref = "-";
  auto* show_cmd = app.add_subcommand("show", "Print a tensor or bundle readably (numpy style, with the shape)");
  show_cmd->add_option("REF", ref, "Tensor reference PATH[#NAME], - for standard input")->capture_default_str();
  tools::describe(*show_cmd, show_cmd->get_description(), "  tensor linspace 0 1 --shape 2,3 | tensor show -\n");
  std::string index_spec;
  auto* get_cmd = app.add_subcommand("get", "Extract a member of a bundle, or part of a tensor (numpy indexing)");
  get_cmd->add_option("REF", ref, "Reference PATH#NAME[/NAME...], or PATH#PREFIX. for the members named PREFIX.*")->required();
  get_cmd->add_option("--index", index_spec, "numpy indexing: -1 (last of axis 0, axis dropped), 0,:,2:5, ::-1 (reversed), 1::2");
  tools::describe(*get_cmd, get_cmd->get_description(), "  tensor arange 24 --shape 2,3,4 | tensor get - --index '-1,:,1:3'\n");

  // cat / stack / select
  std::vector<std::string> refs;
  int axis = 0;
  auto* cat_cmd = app.add_subcommand("cat", "Join tensors along an existing axis (numpy.concatenate)");
  cat_cmd->add_option("REFS", refs, "Tensor references")->required();
  cat_cmd->add_option("--axis", axis, "Axis (negative from the end)")->capture_default_str();
  tools::describe(*cat_cmd, cat_cmd->get_description(), "  tensor cat <(tensor arange 3) <(tensor arange 2)\n");
  auto* stack_cmd = app.add_subcommand("stack", "Stack tensors of one shape along a new axis (numpy.stack)");
  stack_cmd->add_option("REFS", refs, "Tensor references")->required();
  stack_cmd->add_option("--axis", axis, "Axis of the result (negative from the end)")->capture_default_str();
  tools::describe(*stack_cmd, stack_cmd->get_description(), "  tensor stack <(tensor arange 3) <(tensor arange 3) --axis 1\n");
  std::vector<std::string> picked;
  auto* select_cmd = app.add_subcommand("select", "A bundle of some members: by NAME, or by PREFIX. (the prefix stripped)");
  select_cmd->add_option("REF", ref, "Bundle reference")->required();
  select_cmd->add_option("NAMES", picked, "Member names, or prefixes ending in '.' (enc. selects enc.weight_ih_l0 as weight_ih_l0)")->required();
  tools::describe(*select_cmd, select_cmd->get_description(), "  tensor pack enc.w=<(tensor arange 2) dec.w=<(tensor arange 3) | tensor select - enc.\n");
  auto* reshape_cmd = app.add_subcommand("reshape", "Same values, new shape (one size may be -1)");
  reshape_cmd->add_option("REF", ref, "Tensor reference")->required();
  reshape_cmd->add_option("--shape", shape_text, "New shape, e.g. 4,-1 or 4x-1")->required();
  tools::describe(*reshape_cmd, reshape_cmd->get_description(), "  tensor arange 12 | tensor reshape - --shape 3,4\n");
  std::vector<int> axes;
  auto* transpose_cmd = app.add_subcommand("transpose", "Permute the axes (default: reverse them), like numpy.transpose");
  transpose_cmd->add_option("REF", ref, "Tensor reference")->required();
  transpose_cmd->add_option("--axes", axes, "New order of the axes, e.g. 1,0,2")->delimiter(',');
  tools::describe(*transpose_cmd, transpose_cmd->get_description(), "  tensor arange 6 --shape 2,3 | tensor transpose -\n");

  // pack
  std::vector<std::string> members;
  auto* pack_cmd = app.add_subcommand("pack", "Build a bundle from named references");
  pack_cmd->add_option("NAME=REF", members, "Members; NAME may be a path a/b to nest")->required();
  tools::describe(*pack_cmd, pack_cmd->get_description(), "  tensor arange 3 > x.json && tensor pack x=x.json h0=<(tensor arange 2)\n");

  // diff
  std::string ref_b;
  double rtol = 1e-5, atol = 1e-8;
  bool quiet = false;
  auto* diff_cmd = app.add_subcommand("diff", "Compare two tensors or bundles; exit 0 equal within tolerance, 1 differ, 2 trouble");
  diff_cmd->add_option("A", ref, "First reference")->required();
  diff_cmd->add_option("B", ref_b, "Second reference (the expected values)")->required();
  diff_cmd->add_option("--rtol", rtol, "Relative tolerance: |a - b| <= atol + rtol * |b|")->transform(tools::non_negative())->capture_default_str();
  diff_cmd->add_option("--atol", atol, "Absolute tolerance")->transform(tools::non_negative())->capture_default_str();
  diff_cmd->add_flag("-q,--quiet", quiet, "Print nothing, only set the exit status");
  tools::describe(*diff_cmd, diff_cmd->get_description(), "  tensor linspace 0 1 --shape 5 > a.json && tensor arange 0 1.1 0.25 | tensor diff a.json - --rtol 1e-4 --atol 1e-6\n");

  return tools::run(app, argc, argv, [&]() -> int {
    io::Sources sources(in.read_options());
    auto input = [&](const std::string& r) { return sources.tensor(r, "", in.allow_nan); };
    // a shape error names the input: "x.json: reshape: cannot reshape [2, 2] (4 values) to [3] (3 values)"
    auto named = [&](const std::string& r, auto&& f) {
      const Tensor t = input(r);  // (its own errors name it already)
      try {
        return f(t);
      } catch (const Error& e) {
        throw Error(io::display_name(r) + ": " + e.what());
      }
    };
    auto shape = [&](bool allow_infer) { return tools::parse_shape(shape_text, allow_infer); };
    // what we make is held to the same limit as what we read (refused before it is allocated)
    auto limit = [&](const char* what, double count) {
      if (count > static_cast<double>(in.max_elements))
        fail("{}: {} values is more than --max-elements {}", what, count, in.max_elements);
    };
    if (*linspace_cmd) {
      Shape s = shape(false);
      limit("linspace", static_cast<double>(shape_numel(s)));
      tools::emit_value(out, linspace(lo, hi, shape_numel(s)).reshaped(s));
    } else if (*arange_cmd) {
      double start = 0, stop = 0, step = 1;
      if (arange_args.size() == 1) stop = arange_args[0];
      else {
        start = arange_args[0];
        stop = arange_args[1];
        if (arange_args.size() == 3) step = arange_args[2];
      }
      if (step == 0) throw UsageError("arange: STEP must not be zero");
      limit("arange", std::ceil((stop - start) / step));
      Tensor t = arange(start, stop, step);
      if (!shape_text.empty()) t.reshape(shape(true));
      tools::emit_value(out, t);
    } else if (*randn_cmd || *rand_cmd) {
      if (*randn_cmd && !(std_dev >= 0)) throw UsageError("randn: --std must be non-negative");
      if (*rand_cmd && !(low <= high)) throw UsageError("rand: --low must not exceed --high");
      Rng rng(seed);
      Shape s = shape(false);
      limit(*randn_cmd ? "randn" : "rand", static_cast<double>(shape_numel(s)));
      Tensor t = *randn_cmd ? rand_normal(s, rng, static_cast<float>(mean), static_cast<float>(std_dev))
                            : rand_uniform(s, rng, static_cast<float>(low), static_cast<float>(high));
      tools::emit_value(out, t);
    } else if (*show_cmd) {
      // text, not JSON: one block per record
      tools::per_record_text(sources, out, [&] {
        std::string shown = io::pretty_print(sources.tensor_or_bundle(ref));
        if (!shown.empty() && shown.back() == '\n') shown.pop_back();
        return shown;
      });
    } else if (*get_cmd) {
      tools::per_record(sources, out, [&] {
        return index_spec.empty() ? sources.tensor_or_bundle(ref) : io::Value(named(ref, [&](const Tensor& t) { return index(t, index_spec); }));
      });
    } else if (*cat_cmd || *stack_cmd) {
      tools::per_record(sources, out, [&] {
        std::vector<Tensor> parts;
        std::vector<std::string> names;
        for (const auto& r : refs) parts.push_back(input(r)), names.push_back(io::display_name(r));
        return io::Value(*cat_cmd ? concatenate(parts, axis, names) : stack(parts, axis, names));
      });
    } else if (*select_cmd) {
      tools::per_record(sources, out, [&] {
        const io::Value& whole = sources.tensor_or_bundle(ref);
        if (!whole.is_bundle()) fail("{}: is a tensor, not a bundle; select picks members of a bundle", io::display_name(ref));
        if (picked.size() == 1 && picked[0].back() == '.') return io::select_prefix(whole, picked[0], io::display_name(ref));
        io::Value bundle = io::Value::bundle();
        for (const auto& name : picked) {
          const std::string key = name.back() == '.' ? name.substr(0, name.size() - 1) : name;
          bundle.set(key, name.back() == '.' ? io::select_prefix(whole, name, io::display_name(ref)) : sources.value(ref + (ref.find('#') == std::string::npos ? "#" : "/") + name));
        }
        return bundle;
      });
    } else if (*reshape_cmd) {
      Shape s = shape(true);
      tools::per_record(sources, out, [&] { return io::Value(named(ref, [&](const Tensor& t) { return t.reshaped(s); })); });
    } else if (*transpose_cmd) {
      tools::per_record(sources, out, [&] { return io::Value(named(ref, [&](const Tensor& t) { return transpose(t, axes); })); });
    } else if (*pack_cmd) {
      std::vector<std::pair<std::vector<std::string>, std::string>> named;  // (path in the bundle, reference)
      for (const auto& m : members) {
        size_t eq = m.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == m.size())
          throw UsageError(fmt::format("pack: \"{}\" is not NAME=REF", m));
        named.emplace_back(io::parse_reference("pack#" + m.substr(0, eq)).names, m.substr(eq + 1));
      }
      tools::per_record(sources, out, [&] {
        io::Value bundle = io::Value::bundle();
        for (const auto& [names, member_ref] : named) bundle.set_path(names, sources.tensor_or_bundle(member_ref));
        return bundle;
      });
    } else if (*diff_cmd) {
      // like diff(1), trouble (unreadable input, NaN without --allow-nan) is status 2, not 1;
      // streams are compared record by record (paired as every tool pairs them): 1 if any differs
      bool equal = true;
      try {
        std::optional<tools::Output> sink;
        if (!quiet) sink.emplace(out);
        do {
          const size_t record = sources.record_index();
          const std::string at = record ? fmt::format("record {}: ", record + 1) : "";
          io::DiffReport report;
          try {
            const io::Value& a = sources.value(ref);  // A first: its errors come first
            report = io::diff(a, sources.value(ref_b), Tolerance{rtol, atol}, in.allow_nan, ref, ref_b);
          } catch (const Error& e) {
            throw Error(at + e.what());
          }
          equal = equal && report.equal;
          if (sink) sink->write(io::to_json(report.to_value(), out.write_options()));
          if (!report.equal && !quiet) std::cerr << "tensor diff: " << at << report.summary() << '\n';
        } while (sources.next_record());
        if (sink) sink->commit();
      } catch (const Error& e) {
        std::cerr << "tensor: " << e.what() << '\n';
        return 2;
      }
      return equal ? 0 : 1;
    }
    return 0;
  });
}
