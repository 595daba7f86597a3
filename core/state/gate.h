// The gate of a gated delta rule layer, by family (docs/numerics.md, "The recurrence").
//   gdn: one scalar log-space decay per value head and token, g [T, HV];
//   kda: one per value head, token and key channel, g [T, HV, d_k].
#pragma once

namespace statecheck {

enum class GateKind { gdn, kda };

inline const char* gate_kind_name(GateKind kind) {
  return kind == GateKind::gdn ? "gdn" : "kda";
}

}  // namespace statecheck
