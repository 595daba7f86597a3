#include "core/recurrence/gated_delta.h"

#include <cmath>

#include <Eigen/Core>

#include "core/dtype/bf16.h"
#include "core/util/error.h"
#include "core/working_state/column_store.h"

namespace statecheck {

namespace {

// Refuses a non-finite state before it is stored in a working-state format (the scaled formats
// would turn it into a column of garbage, as the checkpoint codecs would).
template <typename T>
void check_finite_before_store(const T* S, size_t n, const WorkingStateRun& ws, int head, int t) {
  for (size_t e = 0; e < n; ++e)
    if (!std::isfinite(S[e]))
      fail("working state {}: non-finite state at layer {}, head {}, token {}, element {}",
           ws.format.name(), ws.layer, head, t, e);
}

// Stores head h's state after token t in the run's format (S_vk fp32, in place).
void store_fp32(const WorkingStateRun& ws, const RecurrenceShape& s, int h, int t, float* S,
                float* e) {
  const size_t n = static_cast<size_t>(s.dv) * s.dk;
  check_finite_before_store(S, n, ws, h, t);
  const RoundingPlace place{
      rounding_key(ws.seed, static_cast<uint32_t>(ws.layer), static_cast<uint32_t>(h)),
      static_cast<uint32_t>(t), static_cast<uint32_t>(ws.sequence)};
  thread_local std::vector<float> scratch;
  scratch.resize(2 * static_cast<size_t>(s.dk));
  ws_store_head_rows(ws.format, S, e, s.dv, s.dk, place, scratch.data(), scratch.data() + s.dk);
}

void head_fp64(const RecurrenceShape& s, const LayerInputs& in, int h, int t0, int t1, double* S,
               double* o, const WorkingStateRun* ws, float* e) {
  const int dk = s.dk, dv = s.dv;
  const int kh = h / s.group();
  const double scale = s.effective_scale();
  std::vector<double> q(dk), k(dk), u(dv), decay(dk);
  for (int t = t0; t < t1; ++t) {
    const float* qt = &in.q[(static_cast<size_t>(t) * s.H + kh) * dk];
    const float* kt = &in.k[(static_cast<size_t>(t) * s.H + kh) * dk];
    const float* vt = &in.v[(static_cast<size_t>(t) * s.HV + h) * dv];
    const double beta = in.beta[static_cast<size_t>(t) * s.HV + h];
    const QkNorms nrm = qk_norms_fp64(qt, kt, dk, s.qk_l2norm);
    const double qn = nrm.q, kn = nrm.k;
    for (int j = 0; j < dk; ++j) {
      q[j] = qt[j] / qn * scale;
      k[j] = kt[j] / kn;
      decay[j] =
          s.gate == GateKind::gdn
              ? std::exp(static_cast<double>(in.g[static_cast<size_t>(t) * s.HV + h]))
              : std::exp(static_cast<double>(in.g[(static_cast<size_t>(t) * s.HV + h) * dk + j]));
    }
    for (int i = 0; i < dv; ++i) {
      double* row = S + static_cast<size_t>(i) * dk;
      double acc = 0.0;
      for (int j = 0; j < dk; ++j) {
        row[j] *= decay[j];
        acc += row[j] * k[j];
      }
      u[i] = acc;
    }
    for (int i = 0; i < dv; ++i) {
      double* row = S + static_cast<size_t>(i) * dk;
      const double w = beta * (vt[i] - u[i]);
      double acc = 0.0;
      for (int j = 0; j < dk; ++j) {
        row[j] += w * k[j];
        acc += row[j] * q[j];
      }
      if (o) o[static_cast<size_t>(t - t0) * dv + i] = acc;
    }
    if (ws && ws->format.kind != WorkingStateKind::fp32) {
      const size_t n = static_cast<size_t>(dv) * dk;
      std::vector<float> S32(S, S + n);
      store_fp32(*ws, s, h, t, S32.data(), e);
      std::copy(S32.begin(), S32.end(), S);
    }
  }
}

void head_fp32(const RecurrenceShape& s, const LayerInputs& in, int h, int t0, int t1, float* S_ptr,
               float* o, Dtype storage, const WorkingStateRun* ws, float* e) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Vec = Eigen::Matrix<float, 1, Eigen::Dynamic>;
  if (storage != Dtype::fp32 && storage != Dtype::bf16)
    fail("gated_delta_head_fp32: state storage {} is not supported (fp32 or bf16)",
         dtype_name(storage));
  const int dk = s.dk, dv = s.dv;
  const int kh = h / s.group();
  const float scale = s.effective_scale();
  Eigen::Map<RowMajor> S(S_ptr, dv, dk);
  Vec q(dk), k(dk), decay(dk);
  for (int t = t0; t < t1; ++t) {
    Eigen::Map<const Vec> qt(&in.q[(static_cast<size_t>(t) * s.H + kh) * dk], dk);
    Eigen::Map<const Vec> kt(&in.k[(static_cast<size_t>(t) * s.H + kh) * dk], dk);
    const float* vt = &in.v[(static_cast<size_t>(t) * s.HV + h) * dv];
    const float beta = in.beta[static_cast<size_t>(t) * s.HV + h];
    if (s.qk_l2norm) {
      q = qt * (scale / std::sqrt(qt.squaredNorm() + static_cast<float>(kQkL2NormEps)));
      k = kt / std::sqrt(kt.squaredNorm() + static_cast<float>(kQkL2NormEps));
    } else {
      q = qt * scale;
      k = kt;
    }
    const bool scalar_gate = s.gate == GateKind::gdn;
    const float a = scalar_gate ? std::exp(in.g[static_cast<size_t>(t) * s.HV + h]) : 0.0f;
    if (!scalar_gate) {
      Eigen::Map<const Vec> gt(&in.g[(static_cast<size_t>(t) * s.HV + h) * dk], dk);
      decay = gt.array().exp();
    }
    // One pass per row (value channel) with the row in L1: decay, u_i = row . k, delta-rule write,
    // readout. Same operation order as the four lines of docs/numerics.md, "The recurrence",
    // element by element.
    for (int i = 0; i < dv; ++i) {
      auto row = S.row(i);
      if (scalar_gate)
        row *= a;
      else
        row.array() *= decay.array();
      const float u = row.dot(k);
      const float w = beta * (vt[i] - u);
      row += w * k;
      const float out = row.dot(q);
      if (o) o[static_cast<size_t>(t - t0) * dv + i] = out;
      if (storage == Dtype::bf16) {
        for (int j = 0; j < dk; ++j) row[j] = round_to_bf16(row[j]);
      }
    }
    if (ws && ws->format.kind != WorkingStateKind::fp32) store_fp32(*ws, s, h, t, S_ptr, e);
  }
}

}  // namespace

void gated_delta_head_fp64(const RecurrenceShape& s, const LayerInputs& in, int h, int t0, int t1,
                           double* S, double* o) {
  head_fp64(s, in, h, t0, t1, S, o, nullptr, nullptr);
}

void gated_delta_head_fp32(const RecurrenceShape& s, const LayerInputs& in, int h, int t0, int t1,
                           float* S, float* o, Dtype storage) {
  head_fp32(s, in, h, t0, t1, S, o, storage, nullptr, nullptr);
}

void gated_delta_head_fp32_ws(const RecurrenceShape& s, const LayerInputs& in, int h, int t0,
                              int t1, float* S, float* e, float* o, const WorkingStateRun& ws) {
  if (ws.format.error_feedback() && !e)
    fail("working state {}: the error-feedback residual array is missing", ws.format.name());
  head_fp32(s, in, h, t0, t1, S, o, Dtype::fp32, &ws, e);
}

void gated_delta_head_fp64_ws(const RecurrenceShape& s, const LayerInputs& in, int h, int t0,
                              int t1, double* S, float* e, double* o, const WorkingStateRun& ws) {
  if (ws.format.error_feedback() && !e)
    fail("working state {}: the error-feedback residual array is missing", ws.format.name());
  head_fp64(s, in, h, t0, t1, S, o, &ws, e);
}

namespace {

// All heads of a layer through `head_fn(h, S_h, e_h, o_h)`, outputs scattered to [T, HV, d_v].
template <typename T, typename HeadFn>
void layer_of_heads(const RecurrenceShape& s, int t0, int t1, T* S, float* e, T* o,
                    HeadFn head_fn) {
  const size_t head = static_cast<size_t>(s.dv) * s.dk;
  std::vector<T> o_head(o ? static_cast<size_t>(t1 - t0) * s.dv : 0);
  for (int h = 0; h < s.HV; ++h) {
    head_fn(h, S + h * head, e ? e + h * head : nullptr, o ? o_head.data() : nullptr);
    if (o) {
      for (int t = 0; t < t1 - t0; ++t)
        for (int i = 0; i < s.dv; ++i)
          o[(static_cast<size_t>(t) * s.HV + h) * s.dv + i] =
              o_head[static_cast<size_t>(t) * s.dv + i];
    }
  }
}

}  // namespace

void gated_delta_layer_fp32_ws(const RecurrenceShape& s, const LayerInputs& in, int t0, int t1,
                               float* S, float* e, float* o, const WorkingStateRun& ws) {
  layer_of_heads<float>(s, t0, t1, S, e, o, [&](int h, float* S_h, float* e_h, float* o_h) {
    gated_delta_head_fp32_ws(s, in, h, t0, t1, S_h, e_h, o_h, ws);
  });
}

void gated_delta_layer_fp64_ws(const RecurrenceShape& s, const LayerInputs& in, int t0, int t1,
                               double* S, float* e, double* o, const WorkingStateRun& ws) {
  layer_of_heads<double>(s, t0, t1, S, e, o, [&](int h, double* S_h, float* e_h, double* o_h) {
    gated_delta_head_fp64_ws(s, in, h, t0, t1, S_h, e_h, o_h, ws);
  });
}

void gated_delta_layer_fp32(const RecurrenceShape& s, const LayerInputs& in, int t0, int t1,
                            float* S, float* o, Dtype storage) {
  const size_t head = static_cast<size_t>(s.dv) * s.dk;
  std::vector<float> o_head(o ? static_cast<size_t>(t1 - t0) * s.dv : 0);
  for (int h = 0; h < s.HV; ++h) {
    gated_delta_head_fp32(s, in, h, t0, t1, S + h * head, o ? o_head.data() : nullptr, storage);
    if (o) {
      for (int t = 0; t < t1 - t0; ++t)
        for (int i = 0; i < s.dv; ++i)
          o[(static_cast<size_t>(t) * s.HV + h) * s.dv + i] =
              o_head[static_cast<size_t>(t) * s.dv + i];
    }
  }
}

void gated_delta_layer_fp64(const RecurrenceShape& s, const LayerInputs& in, int t0, int t1,
                            double* S, double* o) {
  const size_t head = static_cast<size_t>(s.dv) * s.dk;
  std::vector<double> o_head(o ? static_cast<size_t>(t1 - t0) * s.dv : 0);
  for (int h = 0; h < s.HV; ++h) {
    gated_delta_head_fp64(s, in, h, t0, t1, S + h * head, o ? o_head.data() : nullptr);
    if (o) {
      for (int t = 0; t < t1 - t0; ++t)
        for (int i = 0; i < s.dv; ++i)
          o[(static_cast<size_t>(t) * s.HV + h) * s.dv + i] =
              o_head[static_cast<size_t>(t) * s.dv + i];
    }
  }
}

}  // namespace statecheck
