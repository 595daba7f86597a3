#include "core/drive/states_source.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/drive/inputs_file.h"
#include "core/drive/states_file.h"
#include "core/drive/tinylm_drive.h"
#include "core/util/error.h"
#include "core/util/rng.h"

namespace statecheck {

uint64_t sequence_seed(uint64_t seed, int n) {
  return n == 0 ? seed : mix_seed(seed, static_cast<uint64_t>(n), 0x5EC);
}

StatesSource StatesSource::resolve(const DriveSpec& drive, uint64_t seed, const ModelConfig& m,
                                   const std::string& tinylm_config) {
  StatesSource s;
  s.drive_ = drive;
  check_drive_matches_model(s.drive_, m);
  s.name_ = s.drive_.name();
  const RecurrenceShape shape = recurrence_shape(m);
  s.shape_ = shape;
  const DriveKind token_kind = s.drive_.token_drive(m);
  s.inputs_ = [shape, token_kind, seed](int n, int layer, int T) {
    return synthetic_inputs(token_kind, shape, sequence_seed(seed, n), layer, T);
  };
  const size_t layer_size = static_cast<size_t>(shape.HV) * shape.dv * shape.dk;
  switch (s.drive_.kind) {
    case DriveKind::seed_kda:
    case DriveKind::init_gdn:
    case DriveKind::init_kda:
      s.count_ = 1;
      s.prefill_ = true;
      s.initial_ = [layer_size](int, int) { return std::vector<float>(layer_size, 0.0f); };
      break;
    case DriveKind::states: {
      auto states = std::make_shared<std::vector<MultiLayerState>>(
          read_states_file(s.drive_.states_file, m, s.drive_.states_key));
      bool all_zero = true;
      for (const MultiLayerState& st : *states)
        all_zero = all_zero &&
                   std::all_of(st.data.begin(), st.data.end(), [](float x) { return x == 0.0f; });
      if (all_zero)
        std::fprintf(stderr,
                     "statecheck: note: every state value in %s is zero (an empty export?): the "
                     "codecs reproduce it exactly; only errors on its continuation say anything\n",
                     printable(s.drive_.states_file).c_str());
      s.count_ = static_cast<int>(states->size());
      s.prefill_ = false;
      s.name_ = "states:" + s.drive_.states_file;
      s.initial_ = [states, layer_size](int n, int layer) {
        const float* p = (*states)[n].layer(layer);
        return std::vector<float>(p, p + layer_size);
      };
      break;
    }
    case DriveKind::tinylm: {
      // The tiny model's own shapes: any other model is refused with both shapes.
      auto lm = std::make_shared<TinyLMDrive>(tinylm_config);
      lm->check_matches(m);
      s.count_ = lm->count();
      s.prefill_ = false;
      s.name_ = "tinylm:" + lm->config().name;
      s.initial_ = [lm](int n, int layer) { return lm->initial_layer_state(n, layer); };
      s.inputs_ = [lm](int n, int layer, int T) { return lm->layer_inputs(n, layer, T); };
      break;
    }
    case DriveKind::inputs: {
      auto file = std::make_shared<InputsFile>(s.drive_.inputs_file, m);
      s.count_ = file->count();
      s.prefill_ = true;
      s.token_limit_ = file->tokens();
      s.shape_ = file->shape();
      s.name_ = "inputs:" + s.drive_.inputs_file;
      s.initial_ = [file](int n, int layer) { return file->initial_layer_state(n, layer); };
      s.inputs_ = [file](int n, int layer, int T) { return file->layer_inputs(n, layer, T); };
      break;
    }
  }
  return s;
}

void StatesSource::require_finite(const float* x, size_t count, const char* what, int n, int layer,
                                  int head, int tokens) const {
  for (size_t i = 0; i < count; ++i)
    if (!std::isfinite(x[i]))
      fail(
          "{}: sequence {}, layer {}, head {}: the {} is non-finite ({} at flat index {}) after {} "
          "token(s) of the fp32 recurrence; the starting state is too large for fp32 arithmetic",
          name_, n, layer, head, what, x[i], i, tokens);
}

}  // namespace statecheck
