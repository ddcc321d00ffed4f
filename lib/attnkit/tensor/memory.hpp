// Process-wide allocator policy for training loops.
#pragma once

namespace attnkit {

// Keeps freed heap memory mapped instead of handing it back to the system after every step, so the next step's
// tensors reuse pages that are already faulted in (glibc: every block comes from the heap, none from a mapping of
// its own, and the heap is not trimmed below 1 GB of free space). A training step frees and re-allocates the same few hundred MB of
// activations and gradients each time: without this, page faults and the kernel's zeroing of fresh pages take
// a visible share of a recurrent seq2seq step (docs/seq2seq-train.md, "Speed"). It changes no result, only where the
// memory comes from; the resident size stays at the run's peak. Global: every tool calls it (tools::run), the
// library never does. Inference repeats the same allocations too: a Transformer encoder layer (B=16 T=256
// d=512) would fault in 24 MB of fresh pages per call (its LayerNorm, attention and residual outputs), where
// ONNX Runtime's arena reuses its own. A no-op where the C library has no such knobs.
void retain_freed_memory();

}  // namespace attnkit
