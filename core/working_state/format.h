// Working-state formats: how the state the recurrence reads and writes every token is kept
// between tokens (docs/working_state.md). The enum is shared with the CUDA kernels; names,
// parsing and byte counts are host functions (format.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace statecheck {

enum class WorkingStateKind : uint8_t {
  fp32,          // identity: the plain recurrence
  bf16,          // bf16, round to nearest even
  bf16_sr,       // bf16, stochastic rounding
  int8,          // int8 codes + one scale per key channel, round to nearest even
  int8_sr,       // as int8, stochastic rounding
  int8_ef,       // int8 with error feedback, residual kept in fp32
  int8_ef_int4,  // int8 with error feedback, residual kept as int4 codes + a per-channel scale
  fp8_e4m3,      // E4M3 codes + one scale per key channel, round to nearest even
  fp8_e4m3_sr,   // as fp8_e4m3, stochastic rounding
};

struct WorkingStateFormat {
  WorkingStateKind kind = WorkingStateKind::fp32;
  bool bf16_scale = false;  // scales (and the int4 residual's scale) stored as bf16, else fp32

  // "fp32", "bf16", "bf16-sr", "int8", "int8-sr", "int8-ef", "int8-ef-int4", "fp8_e4m3",
  // "fp8_e4m3-sr"; with "+bf16scale" appended for bf16 scales.
  std::string name() const;
  bool stochastic() const;
  bool has_scales() const;
  bool error_feedback() const;
  // Bytes per state element for heads of d_v value channels, counting the values, the per
  // key-channel scales (one per d_v elements) and the error-feedback residual with its scale:
  //   fp32 4; bf16 2; int8 / fp8 1 + s / d_v; int8-ef 1 + s / d_v + 4;
  //   int8-ef-int4 1 + s / d_v + 0.5 + s / d_v; s = 4 (fp32 scales) or 2 (bf16 scales).
  double bytes_per_element(int dv) const;
};

// Parses a name of WorkingStateFormat::name(); unknown names are a statecheck::Error listing the
// valid ones.
WorkingStateFormat parse_working_state_format(const std::string& name);

// Every kind with fp32 scales, in the order of the enum (the order the experiments report).
std::vector<WorkingStateFormat> all_working_state_formats();

}  // namespace statecheck
