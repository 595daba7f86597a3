#include "core/tinylm/linear.h"

namespace statecheck {

namespace {

constexpr int kLanes = 8;

// One tile of R rows of X against C rows of W. The lane loops are independent additions (one per
// lane), which the compiler vectorises without changing the order within a lane.
template <int R, int C>
inline void tile(const float* X, int K, const float* W, float* Y, int ldy, bool accumulate) {
  float acc[R][C][kLanes] = {};
  const int K8 = K - K % kLanes;
  for (int k = 0; k < K8; k += kLanes) {
    for (int r = 0; r < R; ++r) {
      const float* x = X + static_cast<long>(r) * K + k;
      for (int c = 0; c < C; ++c) {
        const float* w = W + static_cast<long>(c) * K + k;
        for (int l = 0; l < kLanes; ++l) acc[r][c][l] = acc[r][c][l] + x[l] * w[l];
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      const float* a = acc[r][c];
      float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
      const float* x = X + static_cast<long>(r) * K;
      const float* w = W + static_cast<long>(c) * K;
      for (int k = K8; k < K; ++k) s = s + x[k] * w[k];
      float& y = Y[static_cast<long>(r) * ldy + c];
      y = accumulate ? y + s : s;
    }
  }
}

}  // namespace

void linear_fixed_order(const float* X, int T, int K, const float* W, int N, float* Y,
                        bool accumulate) {
  constexpr int R = 4, C = 4;  // 16 accumulators of 8 lanes: 16 AVX registers
  const int Nc = N - N % C, Tr = T - T % R;
  for (int n = 0; n < Nc; n += C) {
    const float* w = W + static_cast<long>(n) * K;
    int t = 0;
    for (; t < Tr; t += R)
      tile<R, C>(X + static_cast<long>(t) * K, K, w, Y + static_cast<long>(t) * N + n, N,
                 accumulate);
    for (; t < T; ++t)
      tile<1, C>(X + static_cast<long>(t) * K, K, w, Y + static_cast<long>(t) * N + n, N,
                 accumulate);
  }
  for (int n = Nc; n < N; ++n) {
    const float* w = W + static_cast<long>(n) * K;
    for (int t = 0; t < T; ++t)
      tile<1, 1>(X + static_cast<long>(t) * K, K, w, Y + static_cast<long>(t) * N + n, N,
                 accumulate);
  }
}

}  // namespace statecheck
