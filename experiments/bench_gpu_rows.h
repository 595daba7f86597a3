// What the GPU bench (experiments/bench_gpu.cpp) and its working-state rows
// (experiments/bench_gpu_ws.cpp) share: a result row, the decode shapes of the real models, and
// distinct slot ids. CUDA builds only.
#pragma once

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/state/gate.h"
#include "core/util/rng.h"
#include "experiments/experiment.h"
#include "kernels/common/timing.h"

namespace statecheck::bench_rows {

// One timed launch: its name, median time (ms), bytes by its byte model, FLOPs and tokens, and the
// yardsticks timed next to it.
struct Row {
  std::string name;
  double ms = 0, bytes = 0, flops = 0, tokens = 0;
  double ms_memset_flush = 0;    // the same launch timed after a memset flush (timing.h)
  double ms_same_size_copy = 0;  // a cudaMemcpy moving the same bytes (read + write), same timer
  // The kernel's bytes split into read and written (0: not split), and the mixed stream of the
  // same split and size (kernels/common/bandwidth.h): its bytes and median time, same timer.
  double read_bytes = 0, write_bytes = 0;
  double mix_bytes = 0, ms_mix = 0, ms_mix_memset_flush = 0;
  std::string kernel = {};  // the kernel variant that ran, where a launch chooses among several
  // Compute-bound work on tensor cores: also reported in TFLOP/s (flops by the row's FLOP model)
  // against the mma.sync peak of the same run (kernels/common/mma_peak.h).
  bool tensor_core = false;
  void set_times(const cuda::TimingStats& t) {
    ms = t.median_ms;
    ms_memset_flush = t.memset_flush_median_ms;
  }
};

inline std::vector<int32_t> distinct_slots(int n, int64_t pool_slots, uint64_t seed) {
  std::vector<int32_t> all(pool_slots - 1);
  std::iota(all.begin(), all.end(), 1);  // slot 0 reserved
  Rng rng(seed);
  for (size_t i = all.size() - 1; i > 0; --i) std::swap(all[i], all[rng.below(i + 1)]);
  all.resize(n);
  return all;
}

// A decode shape of the real models: query/key heads H, value heads HV, the gate.
struct DecodeShape {
  const char* name;
  int H, HV;
  GateKind gate;
};

// Working-state decode (kernels/working_state/ws_decode.h): one token per sequence at several
// batches, on the GDN and KDA shapes, for every format with a kernel (fp32 scales), next to the
// fp32- and bf16-state rows of bench_recurrence. Validated before timing: the first 8 sequences
// (all at smaller batches) against the CPU reference bit for bit (codes, scales, outputs). Byte
// model: ws_decode_bytes (codes and scales read and written once, token inputs and outputs).
void bench_working_state(const Options& o, cuda::GpuTimer& timer, std::vector<Row>& rows,
                         int repeats);

// Chunked prefill (kernels/chunked_delta/chunked_prefill.h) at batch x length 64 x 256, 8 x 4096
// and 1 x 32768 (quick: 16 x 64 and 2 x 512) on the GDN and KDA shapes, fp32 state, each next to
// the recurrent prefill (gated_delta_pool) of the same inputs. Validated before timing: the
// chunked outputs and final states against the recurrent kernel's (itself checked against the CPU
// reference by bench_recurrence), relative Frobenius error within tol16 = 4 x 2^-8. Rows carry
// the byte model of gated_delta_pool_bytes and, for the chunked kernel, chunked_prefill_flops.
void bench_chunked_prefill(const Options& o, cuda::GpuTimer& timer, std::vector<Row>& rows,
                           int repeats);

}  // namespace statecheck::bench_rows
