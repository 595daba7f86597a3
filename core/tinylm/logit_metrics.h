// Distances between two next-token distributions given as logits (docs/codecs.md,
// "Logit level").
#pragma once

namespace statecheck {

// Writes log softmax(z) of n logits to out[n], in fp64: out[v] = z[v] - log sum_w exp(z[w]),
// the sum taken after subtracting max z (no overflow). n >= 1.
void log_softmax(const float* z, int n, double* out);

// KL(p || q) = sum_v p[v] (log p[v] - log q[v]) in nats, with p = softmax(z_ref), q = softmax(z),
// computed in fp64 from the fp32 logits; n logits each. Exactly 0 when the logits are identical;
// otherwise >= 0 up to fp64 rounding (|error| ~ 1e-16 n).
double kl_nats(const float* z_ref, const float* z, int n);

// Index of the largest of n logits (the first one on ties): the greedy next token.
int argmax(const float* z, int n);

}  // namespace statecheck
