// An LD_PRELOAD malloc for tests: every heap block starts at a pseudo-random multiple of 16 bytes modulo 64
// (seeded by ATTNKIT_MISALIGN_SEED), where glibc's would land wherever the heap's history put it. A kernel
// whose results depend on its buffers' alignment (Eigen peels unaligned heads off vectorised loops and
// reductions, summing them in another order) gives different bits under different seeds; the tests run
// the same training under two seeds and compare the metrics exactly (tests/cli/seq2seq_train.sh).
// Built as build/lib/libmisalign.so, not in sanitizer builds (ASan replaces malloc itself).
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
}

namespace {
uint64_t state;
bool ready;
constexpr uint64_t kMagic = 0x6d6973616c69676eULL;

unsigned next_offset() {
  if (!ready) {
    const char* s = getenv("ATTNKIT_MISALIGN_SEED");
    state = (s ? strtoull(s, nullptr, 10) : 0) * 0x9E3779B97F4A7C15ULL + 1;
    ready = true;
  }
  state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  return static_cast<unsigned>(state >> 62);  // 0 .. 3
}

// The block is preceded by {the raw pointer, the size, a magic number}.
void* place(size_t size, size_t align) {
  if (align < 16) align = 16;
  char* raw = static_cast<char*>(__libc_malloc(size + align + 200));
  if (!raw) return nullptr;
  uintptr_t p = (reinterpret_cast<uintptr_t>(raw) + 32 + 63) & ~uintptr_t{63};
  p += 16 * next_offset();
  p = (p + align - 1) & ~uintptr_t(align - 1);
  uint64_t* h = reinterpret_cast<uint64_t*>(p) - 3;
  h[0] = reinterpret_cast<uintptr_t>(raw), h[1] = size, h[2] = kMagic;
  return reinterpret_cast<void*>(p);
}

uint64_t* header(void* p) { return static_cast<uint64_t*>(p) - 3; }
}  // namespace

extern "C" {
void* malloc(size_t n) { return place(n, 16); }
void free(void* p) {
  if (!p || header(p)[2] != kMagic) return;  // not ours (cannot happen under LD_PRELOAD): leak, not crash
  header(p)[2] = 0;
  __libc_free(reinterpret_cast<void*>(header(p)[0]));
}
void* calloc(size_t a, size_t b) {
  if (b && a > SIZE_MAX / b) return nullptr;
  void* p = place(a * b, 16);
  if (p) memset(p, 0, a * b);
  return p;
}
void* realloc(void* old, size_t n) {
  if (!old) return malloc(n);
  if (n == 0) {
    free(old);
    return nullptr;
  }
  void* p = malloc(n);
  if (!p) return nullptr;
  const size_t was = header(old)[1];
  memcpy(p, old, was < n ? was : n);
  free(old);
  return p;
}
int posix_memalign(void** out, size_t align, size_t n) {
  void* p = place(n, align);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void* aligned_alloc(size_t align, size_t n) { return place(n, align); }
void* memalign(size_t align, size_t n) { return place(n, align); }
void* valloc(size_t n) { return place(n, 4096); }
void* pvalloc(size_t n) { return place((n + 4095) & ~size_t{4095}, 4096); }
size_t malloc_usable_size(void* p) { return p ? header(p)[1] : 0; }
}
