# Per-file compile options of the library's sources, for every target that compiles them (libattnkit and
# the fuzz build's instrumented copy): source file properties belong to one directory, so each
# directory that lists the sources calls attnkit_kernel_file_flags(<path of lib/>).
function(attnkit_kernel_file_flags lib)
  # The optimizers' update loops: std::sqrt without errno vectorises (vsqrtps), as in PyTorch's own build;
  # and no contraction of a * b + c into fma (GCC's default, even with -std=c++17) beyond the std::fma
  # calls that mirror PyTorch's kernels, so that the arithmetic is the one written and PyTorch's bits are
  # reproduced.
  set_source_files_properties(${lib}/attnkit/train/optimizer.cpp PROPERTIES COMPILE_OPTIONS "-fno-math-errno;-ffp-contract=off")
  # attnkit's own sgemm (ops/gemm_kernel.inc), one build per instruction set; ops::gemm picks at run time.
  # Its fused multiply-adds are written out (VFMA); no other a * b + c is contracted, so that a fused
  # epilogue (alpha * acc, then + bias) rounds as the separate passes it replaces do.
  set_source_files_properties(${lib}/attnkit/ops/gemm_avx2.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-ffp-contract=off")
  set_source_files_properties(${lib}/attnkit/ops/gemm_avx512.cpp PROPERTIES COMPILE_OPTIONS "-mavx512f;-mfma;-ffp-contract=off")
  # The int8 / bfloat16 kernels (ops/quantized.hpp), one build per instruction set, picked at run time; the bf16
  # kernels' fused multiply-adds are written out, in the reference loop's order (std::fma), so all agree bit for bit.
  set_source_files_properties(${lib}/attnkit/ops/quantized_avx2.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-ffp-contract=off")
  set_source_files_properties(${lib}/attnkit/ops/quantized_avx512.cpp PROPERTIES COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vnni;-mfma;-ffp-contract=off")
  set_source_files_properties(${lib}/attnkit/ops/quantized.cpp PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
  # LayerNorm: its sums run several rows in lockstep (detail::fixed_sums); with contraction GCC fused c * c + acc
  # in one form of that loop and not in another, so a row's bits depended on its place in the batch, and the
  # output's fused x * w + b on whether Eigen's peeled scalar head or its vector body computed an element
  # (that is, on the buffer's address). The arithmetic as written, everywhere.
  set_source_files_properties(${lib}/attnkit/ops/layer_norm.cpp PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
endfunction()
