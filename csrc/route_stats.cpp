// SCALE-Route's per-token statistics over a vocab-parallel slice of the two heads' logits, in one
// pass and with no temporary logits tensor:
//
//     out[0, t] = sum_v z_p[t, v] * z_a[t, v]      out[1, t] = sum_v z_p[t, v]^2
//     out[2, t] = sum_v z_a[t, v]^2                 (fp32 accumulation, fp32 or bf16 inputs)
//
// The PyTorch twin is megatron_scale.route_stats.sums.route_statistics_torch; the Python wrapper
// (routing.py) checks devices, dtypes and layouts and passes raw pointers, so this file needs
// pybind11 only, not libtorch. Rows are split over `threads` std::threads (no OpenMP runtime next
// to torch's); the GIL is released while they run.

#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

namespace py = pybind11;

namespace {

enum DType : int { kFloat32 = 0, kBFloat16 = 1 };

inline float load(const float* p, int64_t i) { return p[i]; }

inline float load(const uint16_t* p, int64_t i) {
  uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Independent lanes let the compiler vectorise the three sums without reassociating one.
constexpr int kLanes = 16;

template <typename T>
void row_stats(const T* p, const T* a, int64_t vocab, float* dot, float* pp, float* aa) {
  float sd[kLanes] = {0}, sp[kLanes] = {0}, sa[kLanes] = {0};
  int64_t i = 0;
  for (; i + kLanes <= vocab; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float x = load(p, i + l), y = load(a, i + l);
      sd[l] += x * y;
      sp[l] += x * x;
      sa[l] += y * y;
    }
  }
  for (int l = 0; i < vocab; ++i, ++l) {
    const float x = load(p, i), y = load(a, i);
    sd[l] += x * y;
    sp[l] += x * x;
    sa[l] += y * y;
  }
  for (int w = kLanes / 2; w > 0; w /= 2) {  // pairwise over the lanes
    for (int l = 0; l < w; ++l) {
      sd[l] += sd[l + w];
      sp[l] += sp[l + w];
      sa[l] += sa[l + w];
    }
  }
  *dot = sd[0];
  *pp = sp[0];
  *aa = sa[0];
}

template <typename T>
void rows(const T* p, const T* a, float* out, int64_t tokens, int64_t vocab, int64_t stride_p,
          int64_t stride_a, int64_t begin, int64_t end) {
  for (int64_t t = begin; t < end; ++t) {
    row_stats(p + t * stride_p, a + t * stride_a, vocab, out + t, out + tokens + t,
              out + 2 * tokens + t);
  }
}

template <typename T>
void run(uintptr_t p, uintptr_t a, uintptr_t out, int64_t tokens, int64_t vocab, int64_t stride_p,
         int64_t stride_a, int threads) {
  const T* zp = reinterpret_cast<const T*>(p);
  const T* za = reinterpret_cast<const T*>(a);
  float* o = reinterpret_cast<float*>(out);
  // At least ~64K elements per thread, else thread start-up costs more than it saves.
  const int64_t by_work = std::max<int64_t>(1, tokens * vocab / 65536);
  const int n = static_cast<int>(std::min<int64_t>({threads, tokens, by_work}));
  if (n <= 1) {
    rows(zp, za, o, tokens, vocab, stride_p, stride_a, 0, tokens);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(n - 1);
  const int64_t step = (tokens + n - 1) / n;
  for (int k = 1; k < n; ++k) {
    const int64_t b = std::min(tokens, k * step), e = std::min(tokens, b + step);
    pool.emplace_back(rows<T>, zp, za, o, tokens, vocab, stride_p, stride_a, b, e);
  }
  rows(zp, za, o, tokens, vocab, stride_p, stride_a, 0, std::min(tokens, step));
  for (auto& th : pool) th.join();
}

void route_stats(uintptr_t p, uintptr_t a, uintptr_t out, int64_t tokens, int64_t vocab,
                 int64_t stride_p, int64_t stride_a, int dtype, int threads) {
  if (tokens < 0 || vocab < 0 || stride_p < vocab || stride_a < vocab) {
    throw std::invalid_argument("route_stats: bad sizes or row strides");
  }
  py::gil_scoped_release release;
  switch (dtype) {
    case kFloat32:
      run<float>(p, a, out, tokens, vocab, stride_p, stride_a, threads);
      break;
    case kBFloat16:
      run<uint16_t>(p, a, out, tokens, vocab, stride_p, stride_a, threads);
      break;
    default:
      throw std::invalid_argument("route_stats: dtype code must be 0 (float32) or 1 (bfloat16)");
  }
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "megatron-scale C++ ops (each has a PyTorch twin in Python)";
  m.def("route_stats", &route_stats, py::arg("z_p"), py::arg("z_a"), py::arg("out"),
        py::arg("tokens"), py::arg("vocab"), py::arg("stride_p"), py::arg("stride_a"),
        py::arg("dtype"), py::arg("threads"),
        "Per-token (z_p.z_a, |z_p|^2, |z_a|^2) into a float32 [3, tokens] buffer; raw pointers.");
}
