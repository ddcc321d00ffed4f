#include "attnkit/tensor/memory.hpp"

#include <cstdlib>  // defines __GLIBC__ on glibc (the test below needs a C library header first)
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace attnkit {

void retain_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest: blocks up to 32 MB from the heap, not mmap
  mallopt(M_MMAP_MAX, 0);               // and larger ones too (an LSTM's [T, N, 4H] gates: 52 MB)
  mallopt(M_TRIM_THRESHOLD, 1 << 30);   // keep up to 1 GB of free heap mapped
#endif
}

}  // namespace attnkit
