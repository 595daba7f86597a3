// Experiment `memory`: bytes per state slot, pool totals and the KV-token budget
// (docs/cache_model.md; formulas in core/memory/memory_budget.h).
//
// For the selected model (--model, --tp, dtypes) and pool sizes (--active-slots A, --ckpt-slots C,
// absent: 2A) it reports the active and checkpoint pools in bytes and GiB (2^30; engines print
// these as "GB"), per part (temporal, scales, conv), and the KV-token budget of --gpu-mem-gib x
// --mem-fraction - weights under the engine's accounting (checkpoint pool and slot 0 not
// subtracted) and the correct one, side by side. The table's first row (and the plot's first
// bars) is the model and TP asked for (a shipped name, a config file or a folder); with
// --compare-shipped every shipped model at its default TP follows, each with the weights of its
// own parameter count (--weights-gib applies to the asked model only). SGLang's automatic
// active-pool size (mamba_full_memory_ratio 0.9) is reported next to the given A.
//
// measure_memory computes the budgets (MemoryResult); record_memory writes them into the result
// file and the summary and prints the table.
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "core/memory/memory_budget.h"
#include "core/util/error.h"
#include "core/working_state/format.h"
#include "experiments/cache_common.h"
#include "experiments/experiment.h"

namespace statecheck {

namespace {

// ---- measurement ------------------------------------------------------------------------------

// One model's pools and KV-token budget.
struct ModelMemory {
  ModelConfig model;
  Budget budget;       // at the given pool sizes
  Budget auto_budget;  // SGLang's automatic active pool (ratio split), no checkpoint pool
};

// `own_weights`: the weights from the model's parameter count, not --weights-gib (the comparison
// rows; --weights-gib is the asked model's).
ModelMemory model_memory(const ModelConfig& m, const StateDtypes& dt, const Options& o,
                         bool own_weights) {
  BudgetInputs bi = options_budget_inputs(o, true), auto_bi = options_budget_inputs(o, false);
  if (own_weights) bi.weights_gib = auto_bi.weights_gib = -1.0;
  return ModelMemory{m, compute_budget(m, dt, bi), compute_budget(m, dt, auto_bi)};
}

// A shipped model of the table, at its default TP: its memory, or why these options do not fit
// it.
struct ShippedMemory {
  std::string name;
  int tp = 0;
  std::optional<ModelMemory> memory;
  std::string not_computed;  // the reason, when `memory` is empty
};

// The selected model's pools when the working state itself is kept in a working-state format
// (docs/working_state.md): a slot holds L_lin x HV x d_v x d_k elements at the format's bytes per
// element (values, scales, error-feedback residual) plus the conv state; the checkpoint pool
// holds the same slots, since a checkpoint of a quantized working state is a plain slot copy.
struct WorkingStatePool {
  WorkingStateFormat format;
  double slot_bytes = 0.0;
  double slots_per_gib = 0.0;
  int64_t kv_tokens = 0;  // correct accounting: rest - (A + 1 + C + 1) slots, / KV per token
};

std::vector<WorkingStatePool> working_state_pools(const ModelConfig& m, const Budget& b) {
  std::vector<WorkingStatePool> out;
  const double elements = static_cast<double>(m.linear_layer_count()) * m.value_heads_shard() *
                          m.head_v_dim * m.head_k_dim;
  for (const WorkingStateFormat& f : all_working_state_formats()) {
    WorkingStatePool p{f};
    p.slot_bytes =
        elements * f.bytes_per_element(m.head_v_dim) + static_cast<double>(b.active.per_slot.conv);
    p.slots_per_gib = kGiB / p.slot_bytes;
    const double pools =
        static_cast<double>(b.active.slots + 1 +
                            (b.checkpoint.slots > 0 ? b.checkpoint.slots + 1 : 0)) *
        p.slot_bytes;
    p.kv_tokens = b.kv_bytes_per_token > 0
                      ? std::max<int64_t>(
                            0, static_cast<int64_t>((b.rest_bytes - pools) / b.kv_bytes_per_token))
                      : 0;
    out.push_back(p);
  }
  return out;
}

struct MemoryResult {
  StateDtypes dtypes;
  double gpu_mem_gib = 0.0;  // --gpu-mem-gib, GiB
  double mem_fraction = 0.0;
  bool weights_given = false;  // --weights-gib (else the model's parameter count)
  ModelMemory selected;        // the model of --model, --tp
  // Bytes of the selected model's active + checkpoint pools beyond the memory for caches (0: they
  // fit); where they do not, its correct KV budget is floored at 0 tokens.
  double state_excess_bytes = 0.0;
  std::vector<ShippedMemory> shipped;           // --compare-shipped: in shipped_model_names() order
  std::vector<WorkingStatePool> working_state;  // the selected model, per working-state format
};

// Throws statecheck::Error when the selected model does not fit the options (compute_budget);
// a shipped model that does not fit is named with the reason instead.
MemoryResult measure_memory(const Options& o, const ModelConfig& m) {
  MemoryResult r;
  r.dtypes = options_dtypes(o);
  r.gpu_mem_gib = o.gpu_mem_gib;
  r.mem_fraction = o.mem_fraction;
  r.weights_given = o.weights_gib >= 0;
  r.selected = model_memory(m, r.dtypes, o, false);
  const Budget& b = r.selected.budget;
  r.state_excess_bytes = std::max(
      0.0, static_cast<double>(b.active.total.total() + b.checkpoint.total.total()) - b.rest_bytes);
  for (const std::string& name :
       o.compare_shipped ? shipped_model_names() : std::vector<std::string>{}) {
    const ModelConfig cfg = load_model(name, 0);
    ShippedMemory sm{name, cfg.tp, std::nullopt, ""};
    try {
      sm.memory = model_memory(cfg, r.dtypes, o, true);
    } catch (const Error& e) {
      sm.not_computed = e.what();
    }
    r.shipped.push_back(std::move(sm));
  }
  r.working_state = working_state_pools(m, b);
  return r;
}

// ---- recording --------------------------------------------------------------------------------

void write_pool(H5Writer& f, const std::string& g, const PoolBytes& p, const char* what) {
  f.group(g);
  f.write_scalar(g + "/slots", static_cast<double>(p.slots), "slots",
                 std::string("usable slots of the ") + what);
  f.write_scalar(g + "/slot_bytes", static_cast<double>(p.per_slot.total()), "bytes",
                 "one slot: temporal + scales + conv");
  f.write_scalar(g + "/slot_temporal_bytes", static_cast<double>(p.per_slot.temporal), "bytes",
                 "one slot: temporal state");
  f.write_scalar(g + "/slot_scale_bytes", static_cast<double>(p.per_slot.scale), "bytes",
                 "one slot: int8 scales");
  f.write_scalar(g + "/slot_conv_bytes", static_cast<double>(p.per_slot.conv), "bytes",
                 "one slot: conv state");
  f.write_scalar(g + "/temporal_bytes", static_cast<double>(p.total.temporal), "bytes",
                 "(slots + 1) x temporal");
  f.write_scalar(g + "/scale_bytes", static_cast<double>(p.total.scale), "bytes",
                 "(slots + 1) x scales");
  f.write_scalar(g + "/conv_bytes", static_cast<double>(p.total.conv), "bytes",
                 "(slots + 1) x conv");
  f.write_scalar(g + "/total_bytes", static_cast<double>(p.total.total()), "bytes",
                 "(slots + 1) x slot");
  f.write_scalar(g + "/temporal_gib", p.total.temporal / kGiB, "GiB",
                 "(slots + 1) x temporal, 2^30 bytes");
  f.write_scalar(g + "/scale_gib", p.total.scale / kGiB, "GiB", "(slots + 1) x scales, 2^30 bytes");
  f.write_scalar(g + "/conv_gib", p.total.conv / kGiB, "GiB", "(slots + 1) x conv, 2^30 bytes");
  f.write_scalar(g + "/total_gib", p.total.total() / kGiB, "GiB", "(slots + 1) x slot, 2^30 bytes");
}

void write_model(H5Writer& f, const std::string& g, const ModelMemory& mm) {
  const Budget& b = mm.budget;
  f.group(g);
  f.attr(g, "model", mm.model.name);
  f.attr(g, "tp", static_cast<int64_t>(mm.model.tp));
  f.attr(g, "linear_layers", static_cast<int64_t>(mm.model.linear_layer_count()));
  f.attr(g, "full_layers", static_cast<int64_t>(mm.model.full_layer_count()));
  f.attr(g, "value_heads_per_gpu", static_cast<int64_t>(mm.model.value_heads_shard()));
  f.attr(g, "conv_channels_per_gpu", static_cast<int64_t>(mm.model.conv_dim_shard()));
  write_pool(f, g + "/active", b.active, "active pool");
  write_pool(f, g + "/checkpoint", b.checkpoint, "int8 checkpoint pool");
  f.write_scalar(g + "/kv_bytes_per_token", static_cast<double>(b.kv_bytes_per_token), "bytes",
                 "full-attention KV cache per token per GPU");
  f.write_scalar(g + "/weights_gib", b.weights_bytes / kGiB, "GiB",
                 "weights per GPU (params x bytes per weight / TP unless given)");
  f.write_scalar(g + "/cache_memory_gib", b.rest_bytes / kGiB, "GiB",
                 "device memory x mem_fraction - weights - reserves");
  f.write_scalar(g + "/kv_tokens_engine", static_cast<double>(b.kv_tokens_engine), "tokens",
                 "KV budget, engine accounting: (rest - A x active slot) / KV per token");
  f.write_scalar(g + "/kv_tokens_correct", static_cast<double>(b.kv_tokens_correct), "tokens",
                 "KV budget with slot 0 and the checkpoint pool subtracted");
  f.write_scalar(g + "/kv_tokens_overcommit",
                 static_cast<double>(b.kv_tokens_engine - b.kv_tokens_correct), "tokens",
                 "KV tokens the engine budgets that the memory cannot hold (engine - correct)");
  f.write_scalar(
      g + "/auto_active_slots", static_cast<double>(mm.auto_budget.active.slots), "slots",
      "active pool SGLang sizes automatically (mamba_full_memory_ratio 0.9, no checkpoint pool)");
  f.write_scalar(g + "/auto_kv_tokens_engine", static_cast<double>(mm.auto_budget.kv_tokens_engine),
                 "tokens", "KV budget next to the automatic active pool (engine accounting)");
}

void record_working_state_pools(const std::vector<WorkingStatePool>& pools, const Budget& b,
                                H5Writer& file, Summary& summary) {
  const std::string g = "memory/working_state";
  file.group(g);
  file.attr(g, "note",
            std::string("with a working state kept in int8 (or fp8) a checkpoint is a plain slot "
                        "copy of the same bytes: no quantization at donate, no dequantization at "
                        "restore"));
  std::vector<std::string> names;
  std::vector<double> slot, per_gib, kv;
  fmt::print(
      "memory: working state in a format (A = {}, C = {} slots of that format; a checkpoint is a "
      "plain slot copy):\n",
      b.active.slots, b.checkpoint.slots);
  fmt::print("memory:   {:<14} {:>14} {:>12} {:>16}\n", "format", "B/slot", "slots/GiB",
             "KV tok correct");
  for (const WorkingStatePool& p : pools) {
    names.push_back(p.format.name());
    slot.push_back(p.slot_bytes), per_gib.push_back(p.slots_per_gib);
    kv.push_back(static_cast<double>(p.kv_tokens));
    summary.set("memory.working_state." + p.format.name() + ".slot_bytes", p.slot_bytes);
    summary.set("memory.working_state." + p.format.name() + ".slots_per_gib", p.slots_per_gib);
    summary.set("memory.working_state." + p.format.name() + ".kv_tokens_correct",
                static_cast<double>(p.kv_tokens));
    fmt::print("memory:   {:<14} {:>14.0f} {:>12.1f} {:>16}\n", p.format.name(), p.slot_bytes,
               p.slots_per_gib, p.kv_tokens);
  }
  file.write_strings(g + "/formats", names, "working-state formats, in the order of the arrays");
  const std::vector<size_t> n{pools.size()};
  file.write(g + "/slot_bytes", slot, n, "bytes",
             "one slot: temporal state in the format (values, scales, residual) + conv");
  file.write(g + "/slots_per_gib", per_gib, n, "slots", "slots per 2^30 bytes");
  file.write(g + "/kv_tokens_correct", kv, n, "tokens",
             "KV budget with active and checkpoint pools of that format subtracted (slot 0 "
             "included)");
}

void record_memory(const MemoryResult& r, H5Writer& file, Summary& summary) {
  const StateDtypes& dt = r.dtypes;
  const std::string g = "memory";
  file.group(g);
  file.attr(g, "temporal_dtype", std::string(dtype_name(dt.temporal)));
  file.attr(g, "scale_dtype", std::string(dtype_name(dt.scale)));
  file.attr(g, "conv_dtype", std::string(dtype_name(dt.conv)));
  file.attr(g, "kv_dtype", std::string(dtype_name(dt.kv)));
  file.attr(g, "gpu_mem_gib", r.gpu_mem_gib);
  file.attr(g, "mem_fraction", r.mem_fraction);
  file.attr(g, "pool_contents", std::string("bookkeeping (byte formulas only)"));

  const ModelMemory& sel = r.selected;
  const ModelConfig& m = sel.model;
  write_model(file, g + "/selected", sel);
  const Budget& b = sel.budget;
  for (const auto& [name, pool] : {std::pair<std::string, const PoolBytes*>{"active", &b.active},
                                   {"checkpoint", &b.checkpoint}}) {
    summary.set(fmt::format("memory.{}.temporal_gib", name), pool->total.temporal / kGiB);
    summary.set(fmt::format("memory.{}.conv_gib", name), pool->total.conv / kGiB);
    summary.set(fmt::format("memory.{}.scale_gib", name), pool->total.scale / kGiB);
    summary.set(fmt::format("memory.{}.total_gib", name), pool->total.total() / kGiB);
    summary.set(fmt::format("memory.{}.slot_bytes", name),
                static_cast<double>(pool->per_slot.total()));
  }
  summary.set("memory.kv_tokens.engine", static_cast<double>(b.kv_tokens_engine));
  summary.set("memory.kv_tokens.correct", static_cast<double>(b.kv_tokens_correct));
  summary.set("memory.kv_tokens.overcommit",
              static_cast<double>(b.kv_tokens_engine - b.kv_tokens_correct));
  // Where the pools alone exceed the memory for caches the correct budget is 0 KV tokens; the
  // excess is reported instead of being hidden by that floor.
  const double state_excess = r.state_excess_bytes;
  file.write_scalar(g + "/selected/state_pools_over_cache_memory_gib", state_excess / kGiB, "GiB",
                    "active + checkpoint pools beyond the memory for caches (0: they fit)");
  summary.set("memory.state_pools_over_cache_memory_gib", state_excess / kGiB);
  if (state_excess > 0)
    fmt::print(
        "memory: the state pools exceed the memory for caches ({:.2f} GiB) by {:.2f} GiB: the "
        "correct KV budget is 0 tokens, the engine's {}\n",
        b.rest_bytes / kGiB, state_excess / kGiB, b.kv_tokens_engine);
  summary.set("memory.kv_bytes_per_token", static_cast<double>(b.kv_bytes_per_token));
  summary.set("memory.auto.active_slots", static_cast<double>(sel.auto_budget.active.slots));
  summary.set("memory.checkpoint_over_active_slot_bytes",
              static_cast<double>(b.checkpoint.per_slot.total()) /
                  static_cast<double>(b.active.per_slot.total()));

  fmt::print("memory: {} TP {}, temporal {}, scales {}, conv {}; pools A = {}, C = {}\n", m.name,
             m.tp, dtype_name(dt.temporal), dtype_name(dt.scale), dtype_name(dt.conv),
             b.active.slots, b.checkpoint.slots);
  fmt::print("memory: {:<22} {:>14} {:>14} {:>12} {:>12} {:>14} {:>14} {:>12}\n", "model (TP)",
             "active B/slot", "ckpt B/slot", "active GiB", "ckpt GiB", "KV tok engine",
             "KV tok correct", "auto A");
  // The asked model first; its group is "selected" (the plot draws the groups of memory/models).
  const auto row = [](const std::string& label, const ModelMemory& mm) {
    fmt::print("memory: {:<22} {:>14} {:>14} {:>12.3f} {:>12.3f} {:>14} {:>14} {:>12}\n", label,
               mm.budget.active.per_slot.total(), mm.budget.checkpoint.per_slot.total(),
               mm.budget.active.total.total() / kGiB, mm.budget.checkpoint.total.total() / kGiB,
               mm.budget.kv_tokens_engine, mm.budget.kv_tokens_correct,
               mm.auto_budget.active.slots);
  };
  row(fmt::format("{} ({})", m.name, m.tp), sel);
  fmt::print("memory: weights {:.2f} GiB per GPU ({}), memory for caches {:.2f} GiB\n",
             b.weights_bytes / kGiB,
             r.weights_given ? "--weights-gib"
                             : fmt::format("{:.2f}B parameters x {} bytes / TP {}",
                                           m.params_billion, m.weight_bytes_per_param, m.tp),
             b.rest_bytes / kGiB);
  std::vector<std::string> names = {"selected"}, not_computed;
  for (const ShippedMemory& sm : r.shipped) {
    const std::string& name = sm.name;
    if (!sm.memory) {
      // The table is context for the selected model (whose errors do fail the run): a shipped
      // model that does not fit these options is named with the reason instead.
      fmt::print("memory: {:<22} not computed: {}\n", fmt::format("{} ({})", name, sm.tp),
                 sm.not_computed);
      not_computed.push_back(fmt::format("{} (TP {}): {}", name, sm.tp, sm.not_computed));
      continue;
    }
    const ModelMemory& mm = *sm.memory;
    write_model(file, g + "/" + name, mm);
    names.push_back(name);
    summary.set(fmt::format("memory.{}.active.slot_bytes", name),
                static_cast<double>(mm.budget.active.per_slot.total()));
    summary.set(fmt::format("memory.{}.checkpoint.slot_bytes", name),
                static_cast<double>(mm.budget.checkpoint.per_slot.total()));
    summary.set(fmt::format("memory.{}.kv_bytes_per_token", name),
                static_cast<double>(mm.budget.kv_bytes_per_token));
    summary.set(fmt::format("memory.{}.kv_tokens.engine", name),
                static_cast<double>(mm.budget.kv_tokens_engine));
    summary.set(fmt::format("memory.{}.kv_tokens.correct", name),
                static_cast<double>(mm.budget.kv_tokens_correct));
    row(fmt::format("{} ({})", name, sm.tp), mm);
  }
  if (r.shipped.empty())
    fmt::print("memory: (--compare-shipped adds the shipped models at their default TP)\n");
  file.write_strings(g + "/models", names,
                     "groups drawn, in order: 'selected' (the model and TP asked for), then with "
                     "--compare-shipped each shipped model at its default TP");
  if (!not_computed.empty())
    file.write_strings(g + "/models_not_computed", not_computed,
                       "shipped models these options do not fit, with the reason");
  record_working_state_pools(r.working_state, b, file, summary);
}

}  // namespace

void run_memory(const Options& o, const ModelConfig& m, H5Writer& file, Summary& summary) {
  record_memory(measure_memory(o, m), file, summary);
}

}  // namespace statecheck
