#include "core/working_state/format.h"

#include "core/util/error.h"

namespace statecheck {

namespace {

struct KindName {
  WorkingStateKind kind;
  const char* name;
};

constexpr KindName kKinds[] = {
    {WorkingStateKind::fp32, "fp32"},
    {WorkingStateKind::bf16, "bf16"},
    {WorkingStateKind::bf16_sr, "bf16-sr"},
    {WorkingStateKind::int8, "int8"},
    {WorkingStateKind::int8_sr, "int8-sr"},
    {WorkingStateKind::int8_ef, "int8-ef"},
    {WorkingStateKind::int8_ef_int4, "int8-ef-int4"},
    {WorkingStateKind::fp8_e4m3, "fp8_e4m3"},
    {WorkingStateKind::fp8_e4m3_sr, "fp8_e4m3-sr"},
};

constexpr const char* kBf16ScaleSuffix = "+bf16scale";

}  // namespace

std::string WorkingStateFormat::name() const {
  for (const KindName& k : kKinds)
    if (k.kind == kind)
      return std::string(k.name) + (bf16_scale && has_scales() ? kBf16ScaleSuffix : "");
  fail("working-state format: unknown kind {}", static_cast<int>(kind));
}

bool WorkingStateFormat::stochastic() const {
  return kind == WorkingStateKind::bf16_sr || kind == WorkingStateKind::int8_sr ||
         kind == WorkingStateKind::fp8_e4m3_sr;
}

bool WorkingStateFormat::has_scales() const {
  return kind != WorkingStateKind::fp32 && kind != WorkingStateKind::bf16 &&
         kind != WorkingStateKind::bf16_sr;
}

bool WorkingStateFormat::error_feedback() const {
  return kind == WorkingStateKind::int8_ef || kind == WorkingStateKind::int8_ef_int4;
}

double WorkingStateFormat::bytes_per_element(int dv) const {
  if (dv <= 0) fail("working-state format {}: d_v must be positive, got {}", name(), dv);
  const double scale = (bf16_scale ? 2.0 : 4.0) / dv;
  switch (kind) {
    case WorkingStateKind::fp32:
      return 4.0;
    case WorkingStateKind::bf16:
    case WorkingStateKind::bf16_sr:
      return 2.0;
    case WorkingStateKind::int8:
    case WorkingStateKind::int8_sr:
    case WorkingStateKind::fp8_e4m3:
    case WorkingStateKind::fp8_e4m3_sr:
      return 1.0 + scale;
    case WorkingStateKind::int8_ef:
      return 1.0 + scale + 4.0;
    case WorkingStateKind::int8_ef_int4:
      return 1.0 + scale + 0.5 + scale;
  }
  fail("working-state format: unknown kind {}", static_cast<int>(kind));
}

WorkingStateFormat parse_working_state_format(const std::string& name) {
  std::string base = name;
  bool bf16_scale = false;
  const std::string suffix = kBf16ScaleSuffix;
  if (base.size() > suffix.size() &&
      base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0) {
    base.resize(base.size() - suffix.size());
    bf16_scale = true;
  }
  std::string valid;
  for (const KindName& k : kKinds) {
    if (base == k.name) {
      WorkingStateFormat f{k.kind, bf16_scale};
      if (bf16_scale && !f.has_scales())
        fail("working-state format '{}': {} has no scales to store in bf16", name, k.name);
      return f;
    }
    valid += std::string(valid.empty() ? "" : ", ") + k.name;
  }
  fail("working-state format '{}' is not one of {} (scaled ones may end in {})", name, valid,
       suffix);
}

std::vector<WorkingStateFormat> all_working_state_formats() {
  std::vector<WorkingStateFormat> out;
  for (const KindName& k : kKinds) out.push_back({k.kind, false});
  return out;
}

}  // namespace statecheck
