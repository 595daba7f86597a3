#include "core/recurrence/chunked_delta.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/recurrence/gated_delta.h"
#include "core/util/error.h"

namespace statecheck {

void gated_delta_head_chunked_fp64(const RecurrenceShape& s, const LayerInputs& in, int h, int t0,
                                   int t1, int chunk, double* S, double* o) {
  if (chunk < 1) fail("chunked gated delta: chunk size {} must be at least 1", chunk);
  const int dk = s.dk, dv = s.dv;
  const int kh = h / s.group();
  const double scale = s.effective_scale();
  const size_t cap = static_cast<size_t>(std::min(chunk, std::max(t1 - t0, 1)));
  // Per chunk: normalised q (scaled) and k [n, d_k], cumulative log decay G [n, d_k], beta [n],
  // v [n, d_v], A [n, n], U [n, d_v].
  std::vector<double> Q(cap * dk), K(cap * dk), G(cap * dk), B(cap), V(cap * dv), A(cap * cap),
      U(cap * dv);
  for (int c0 = t0; c0 < t1; c0 += chunk) {
    const int n = std::min(chunk, t1 - c0);
    for (int r = 0; r < n; ++r) {
      const int t = c0 + r;
      const float* qt = &in.q[(static_cast<size_t>(t) * s.H + kh) * dk];
      const float* kt = &in.k[(static_cast<size_t>(t) * s.H + kh) * dk];
      const QkNorms nrm = qk_norms_fp64(qt, kt, dk, s.qk_l2norm);
      const double qn = nrm.q, kn = nrm.k;
      for (int j = 0; j < dk; ++j) {
        Q[r * dk + j] = qt[j] / qn * scale;
        K[r * dk + j] = kt[j] / kn;
        const double g =
            s.gate == GateKind::gdn
                ? static_cast<double>(in.g[static_cast<size_t>(t) * s.HV + h])
                : static_cast<double>(in.g[(static_cast<size_t>(t) * s.HV + h) * dk + j]);
        G[r * dk + j] = (r == 0 ? 0.0 : G[(r - 1) * dk + j]) + g;
      }
      B[r] = in.beta[static_cast<size_t>(t) * s.HV + h];
      for (int i = 0; i < dv; ++i)
        V[r * dv + i] = in.v[(static_cast<size_t>(t) * s.HV + h) * dv + i];
    }
    // A (strictly lower) and W (into U), then the forward substitution (I + A) U = W.
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < r; ++c) {
        double acc = 0.0;
        for (int j = 0; j < dk; ++j)
          acc += K[r * dk + j] * K[c * dk + j] * std::exp(G[r * dk + j] - G[c * dk + j]);
        A[r * n + c] = B[r] * acc;
      }
      for (int i = 0; i < dv; ++i) {
        double acc = 0.0;
        for (int j = 0; j < dk; ++j)
          acc += S[static_cast<size_t>(i) * dk + j] * std::exp(G[r * dk + j]) * K[r * dk + j];
        U[r * dv + i] = B[r] * (V[r * dv + i] - acc);
      }
      for (int c = 0; c < r; ++c)
        for (int i = 0; i < dv; ++i) U[r * dv + i] -= A[r * n + c] * U[c * dv + i];
    }
    if (o) {
      for (int r = 0; r < n; ++r) {
        double* orow = o + static_cast<size_t>(c0 - t0 + r) * dv;
        for (int i = 0; i < dv; ++i) {
          double acc = 0.0;
          for (int j = 0; j < dk; ++j)
            acc += S[static_cast<size_t>(i) * dk + j] * std::exp(G[r * dk + j]) * Q[r * dk + j];
          orow[i] = acc;
        }
        for (int c = 0; c <= r; ++c) {
          double kq = 0.0;
          for (int j = 0; j < dk; ++j)
            kq += K[c * dk + j] * Q[r * dk + j] * std::exp(G[r * dk + j] - G[c * dk + j]);
          for (int i = 0; i < dv; ++i) orow[i] += U[c * dv + i] * kq;
        }
      }
    }
    const double* Gn = &G[static_cast<size_t>(n - 1) * dk];
    for (int i = 0; i < dv; ++i) {
      double* row = S + static_cast<size_t>(i) * dk;
      for (int j = 0; j < dk; ++j) {
        double acc = row[j] * std::exp(Gn[j]);
        for (int c = 0; c < n; ++c)
          acc += U[c * dv + i] * K[c * dk + j] * std::exp(Gn[j] - G[c * dk + j]);
        row[j] = acc;
      }
    }
  }
}

void gated_delta_layer_chunked_fp64(const RecurrenceShape& s, const LayerInputs& in, int t0, int t1,
                                    int chunk, double* S, double* o) {
  const size_t head = static_cast<size_t>(s.dv) * s.dk;
  std::vector<double> o_head(o ? static_cast<size_t>(t1 - t0) * s.dv : 0);
  for (int h = 0; h < s.HV; ++h) {
    gated_delta_head_chunked_fp64(s, in, h, t0, t1, chunk, S + h * head,
                                  o ? o_head.data() : nullptr);
    if (o) {
      for (int t = 0; t < t1 - t0; ++t)
        for (int i = 0; i < s.dv; ++i)
          o[(static_cast<size_t>(t) * s.HV + h) * s.dv + i] =
              o_head[static_cast<size_t>(t) * s.dv + i];
    }
  }
}

double chunked_delta_flops_per_head(long long T, int chunk, int dk, int dv) {
  auto per_chunk = [&](double n) {
    return 4.0 * n * n * dk + 3.0 * n * n * dv + 6.0 * n * dk * dv;
  };
  const long long full = T / chunk, rest = T % chunk;
  return static_cast<double>(full) * per_chunk(chunk) +
         (rest ? per_chunk(static_cast<double>(rest)) : 0.0);
}

}  // namespace statecheck
