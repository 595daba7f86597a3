// First-order model of how errors injected into a gated-delta state by repeated checkpoints add
// up (docs/numerics.md, "The recurrence", "Why error does not compound"; experiment `chain`).
//
// A perturbation E [d_v, d_k] of the state evolves like the state without its input term:
//   E <- E diag(exp(g))            (GDN: one g for every key channel)
//   E <- E (I - beta k k^T)        (||k|| = 1)
// Column j of E loses energy at exp(2 g_j) per token from the decay. The delta-rule write scales
// E's component along k by (1 - beta), which removes 1 - (1 - beta)^2 of the energy along k; for
// a k of random direction that is, on average, exactly (2 beta - beta^2) / d_k of E's energy. Per
// column it is ||E_j||^2 (2 beta / d_k - 2 beta^2 / (d_k (d_k + 2))) taken from the column and
// beta^2 ||E||^2 / (d_k (d_k + 2)) spread over all columns; the model gives every column the
// head's average, so, to first order, column j's energy contracts per token at the rate
//   rate_j = -2 mean_t(g_j) + mean_t(1 - (1 - beta)^2) / d_k.
// Exact for the head's total when all columns decay alike (GDN); where they do not (KDA) the slow
// columns, which carry most of the error, lose up to ~beta^2 / d_k per token more than modelled,
// so the model predicts slightly more saturation growth than measured. The model also assumes k
// isotropic on average and the errors of different checkpoints independent.
#pragma once

#include <vector>

#include "core/recurrence/gated_delta.h"

namespace statecheck {

// Per-(value head, key channel) contraction rates of one layer's inputs, averaged over the T
// tokens: [HV, d_k] row-major, natural log of energy per token (>= 0 for g <= 0, beta in [0, 1]).
// GDN gates g [T, HV] give every channel of a head the same rate; KDA gates g [T, HV, d_k] give
// each channel its own; beta is [T, HV]. Throws statecheck::Error when the arrays do not match
// `shape` (LayerInputs::check) or T < 1.
std::vector<double> contraction_rates(const RecurrenceShape& shape, const LayerInputs& in);

// Mean log-decay per token of each value head, averaged over tokens and (KDA) key channels: [HV],
// natural log per token. Same input contract as contraction_rates.
std::vector<double> mean_log_decay(const RecurrenceShape& shape, const LayerInputs& in);

// Error energy at T after checkpoints every `spacing` tokens (at spacing, 2 spacing, ..., T), in
// units of one checkpoint's injected energy, when every later token multiplies it by
// exp(-rate): sum_{m = 0}^{T/spacing - 1} exp(-rate m spacing) = (1 - exp(-rate T)) /
// (1 - exp(-rate spacing)); T / spacing for rate = 0 (nothing contracts), more for a negative
// rate (growth), NaN for a NaN rate. Throws statecheck::Error unless 0 < spacing and spacing
// divides T.
double accumulated_checkpoints(double rate, int T, int spacing);

}  // namespace statecheck
