// Tensors in every format: a bundle written to JSON, .npz and .safetensors and a tensor to .npy (the format
// chosen by the extension, each file written atomically), read back bit for bit; JSON text parsed and printed.
//   usage: tensor_files DIRECTORY     (writes bundle.json, bundle.npz, bundle.safetensors, weight.npy there)
#include <algorithm>
#include <cstdio>
#include <string>

#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/json_writer.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"

using namespace attnkit;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::equal(a.values().begin(), a.values().end(), b.values().begin());
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  try {
    Rng rng(7);
    io::Value bundle;  // a bundle of named tensors, as a PyTorch state_dict
    bundle.set("encoder.weight", rand_normal({3, 4}, rng)).set("encoder.bias", rand_normal({3}, rng));
    const Tensor parsed = io::parse_json("[[0.5, -1], [2, 1e-3]]", "inline text").tensor();  // [2, 2]
    std::printf("parsed %s: %s\n", parsed.shape_str().c_str(), io::to_json(parsed).c_str());

    for (const char* name : {"bundle.json", "bundle.npz", "bundle.safetensors"}) {
      const std::string path = dir + "/" + name;
      io::write_value_file(path, bundle);               // JSON, .npz or .safetensors by the extension
      const io::Value back = io::read_value_file(path);  // "encoder.weight" -> tensor, ...
      bool same = back.names() == bundle.names();
      for (const std::string& member : bundle.names())
        same = same && same_bits(back.find(member)->tensor(), bundle.find(member)->tensor());
      std::printf("%-18s %s: %s\n", name, io::format_name(io::file_format(path)).data(),
                  same ? "read back bit for bit" : "DIFFERENT");
      if (!same) return 1;
    }
    const std::string npy = dir + "/weight.npy";  // .npy holds one tensor
    io::write_value_file(npy, bundle.find("encoder.weight")->tensor());
    const bool same = same_bits(io::read_value_file(npy).tensor(), bundle.find("encoder.weight")->tensor());
    std::printf("%-18s .npy: %s\n", "weight.npy", same ? "read back bit for bit" : "DIFFERENT");
    return same ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "tensor_files: %s\n", e.what());
    return 1;
  }
}
