#include "core/model/model_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "core/io/paths.h"
#include "core/model/param_count.h"
#include "core/util/error.h"
#include "core/util/json_int.h"

namespace statecheck {

namespace fs = std::filesystem;
using nlohmann::json;

int ModelConfig::kv_heads_shard() const {
  if (full_attention.kind == FullAttentionSpec::Kind::mla) return 1;
  return std::max(1, full_attention.num_kv_heads / tp);
}

std::string data_dir() {
  if (const char* env = std::getenv("STATECHECK_DATA_DIR"); env && *env) return env;
  return std::string(STATECHECK_SOURCE_DIR) + "/data";
}

namespace {

// An integer value of a config within [-1e6, 1e6]; `field` names it in the error ("linear.x",
// "full_attention_layers[3]"), which quotes the value as written.
int bounded_int(const json& v, const std::string& origin, const std::string& field) {
  if (!v.is_number_integer()) fail("{}: field '{}' must be an integer", origin, field);
  const int64_t x = json_int64(v);
  if (x < -1000000 || x > 1000000)
    fail("{}: field '{}' = {} is outside [-1e6, 1e6]", origin, field, v.dump());
  return static_cast<int>(x);
}

// Reads a required integer field, naming the origin and the field path on failure.
int get_int(const json& j, const char* key, const std::string& origin, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) fail("{}: missing field '{}{}'", origin, where, key);
  return bounded_int(j.at(key), origin, where + key);
}

int get_int_or(const json& j, const char* key, int fallback, const std::string& origin,
               const std::string& where) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  return get_int(j, key, origin, where);
}

std::vector<int> get_int_list(const json& j, const char* key, const std::string& origin,
                              const std::string& where) {
  if (!j.contains(key)) fail("{}: missing field '{}{}'", origin, where, key);
  const json& v = j.at(key);
  if (!v.is_array()) fail("{}: field '{}{}' must be a list of integers", origin, where, key);
  std::vector<int> out;
  for (size_t i = 0; i < v.size(); ++i)
    out.push_back(bounded_int(v[i], origin, fmt::format("{}{}[{}]", where, key, i)));
  return out;
}

// Linear layers = all layers not in `full` (sorted, 0-based).
void complete_layers(ModelConfig& m, const std::string& origin) {
  if (m.num_layers <= 0 || m.num_layers > 100000)
    fail("{}: the number of layers must be in [1, 100000], got {}", origin, m.num_layers);
  std::set<int> full(m.full_layers.begin(), m.full_layers.end());
  if (full.size() != m.full_layers.size())
    fail("{}: a full-attention layer index is listed twice", origin);
  for (int l : m.full_layers) {
    if (l < 0 || l >= m.num_layers)
      fail("{}: full-attention layer index {} outside [0, {})", origin, l, m.num_layers);
  }
  m.full_layers.assign(full.begin(), full.end());
  m.linear_layers.clear();
  for (int l = 0; l < m.num_layers; ++l)
    if (!full.count(l)) m.linear_layers.push_back(l);
}

ModelConfig parse_statecheck_schema(const json& j, const std::string& origin) {
  ModelConfig m;
  if (!j.contains("name") || !j["name"].is_string())
    fail("{}: field 'name' must be present and a string", origin);
  m.name = j["name"].get<std::string>();
  m.source = j.value("source", std::string());
  const std::string family = j["family"].is_string() ? j["family"].get<std::string>() : "";
  if (family == "gdn")
    m.gate = GateKind::gdn;
  else if (family == "kda")
    m.gate = GateKind::kda;
  else
    fail("{}: field 'family' must be \"gdn\" or \"kda\", got {}", origin, j["family"].dump());
  m.num_layers = get_int(j, "num_layers", origin, "");
  m.full_layers = get_int_list(j, "full_attention_layers", origin, "");
  if (!j.contains("linear")) fail("{}: missing field 'linear'", origin);
  const json& lin = j["linear"];
  m.num_key_heads = get_int(lin, "num_key_heads", origin, "linear.");
  m.num_value_heads = get_int(lin, "num_value_heads", origin, "linear.");
  m.head_k_dim = get_int(lin, "head_k_dim", origin, "linear.");
  m.head_v_dim = get_int(lin, "head_v_dim", origin, "linear.");
  m.conv_width = get_int(lin, "conv_width", origin, "linear.");
  const std::string layout = lin.value("conv_layout", std::string("channels_first"));
  if (layout == "channels_first")
    m.conv_layout = ConvLayout::channels_first;
  else if (layout == "window_first")
    m.conv_layout = ConvLayout::window_first;
  else
    fail("{}: field 'linear.conv_layout' must be channels_first or window_first", origin);
  if (!j.contains("full_attention")) fail("{}: missing field 'full_attention'", origin);
  const json& fa = j["full_attention"];
  const std::string kind = fa.value("kind", std::string());
  if (kind == "mha") {
    m.full_attention.kind = FullAttentionSpec::Kind::mha;
    m.full_attention.num_kv_heads = get_int(fa, "num_kv_heads", origin, "full_attention.");
    m.full_attention.head_dim = get_int(fa, "head_dim", origin, "full_attention.");
  } else if (kind == "mla") {
    m.full_attention.kind = FullAttentionSpec::Kind::mla;
    m.full_attention.kv_lora_rank = get_int(fa, "kv_lora_rank", origin, "full_attention.");
    m.full_attention.rope_dim = get_int(fa, "rope_dim", origin, "full_attention.");
  } else {
    fail("{}: field 'full_attention.kind' must be \"mha\" or \"mla\"", origin);
  }
  if (j.contains("params_billion")) {
    if (!j["params_billion"].is_number())
      fail("{}: field 'params_billion' must be a number", origin);
    m.params_billion = j["params_billion"].get<double>();
  } else {
    m.weights_unknown = "field 'params_billion' is absent";
  }
  if (j.contains("active_params_billion")) {
    if (!j["active_params_billion"].is_number())
      fail("{}: field 'active_params_billion' must be a number", origin);
    m.active_params_billion = j["active_params_billion"].get<double>();
  }
  m.ssm_dtype = j.value("ssm_dtype", std::string("float32"));
  m.default_tp = get_int_or(j, "default_tp", 1, origin, "");
  complete_layers(m, origin);
  return m;
}

// A model's name is printed in logs and stored in result files.
constexpr size_t kMaxModelName = 256;

// Hugging Face config.json of Qwen3-Next / Qwen3.5 (fields linear_*; layer_types or
// full_attention_interval) or Kimi-Linear (linear_attn_config with 1-based layer lists).
ModelConfig parse_hf_config(const json& top, const std::string& origin) {
  const json& j =
      top.contains("text_config") && top["text_config"].is_object() ? top["text_config"] : top;
  const std::string where = &j == &top ? "" : "text_config.";
  const std::string model_type = top.value("model_type", j.value("model_type", std::string()));
  ModelConfig m;
  m.source = origin;
  m.name = top.value("_name_or_path", std::string());
  // Configs saved locally may leave '_name_or_path' empty or make it a long directory path.
  if (m.name.empty() || m.name.size() > kMaxModelName) m.name = model_type;
  m.num_layers = get_int(j, "num_hidden_layers", origin, where);
  if (model_type.rfind("qwen3_next", 0) == 0 || model_type.rfind("qwen3_5", 0) == 0) {
    m.gate = GateKind::gdn;
    m.num_key_heads = get_int(j, "linear_num_key_heads", origin, where);
    m.num_value_heads = get_int(j, "linear_num_value_heads", origin, where);
    m.head_k_dim = get_int(j, "linear_key_head_dim", origin, where);
    m.head_v_dim = get_int(j, "linear_value_head_dim", origin, where);
    // transformers' Qwen3NextConfig defaults linear_conv_kernel_dim to 4 (and so the engines
    // that load the config through it): the same here, said on stderr.
    if (!j.contains("linear_conv_kernel_dim") || j["linear_conv_kernel_dim"].is_null())
      std::fprintf(stderr,
                   "statecheck: note: %s: no '%slinear_conv_kernel_dim'; using 4, the default of "
                   "transformers' Qwen3NextConfig\n",
                   printable(origin).c_str(), where.c_str());
    m.conv_width = get_int_or(j, "linear_conv_kernel_dim", 4, origin, where);
    m.conv_layout = ConvLayout::channels_first;
    m.full_attention.kind = FullAttentionSpec::Kind::mha;
    m.full_attention.num_kv_heads = get_int(j, "num_key_value_heads", origin, where);
    m.full_attention.head_dim = get_int(j, "head_dim", origin, where);
    if (j.contains("layer_types") && !j["layer_types"].is_null() && !j["layer_types"].is_array())
      fail("{}: field '{}layer_types' must be a list", origin, where);
    if (j.contains("layer_types") && j["layer_types"].is_array()) {
      const json& types = j["layer_types"];
      if (static_cast<int>(types.size()) != m.num_layers)
        fail("{}: field '{}layer_types' has {} entries but num_hidden_layers is {}", origin, where,
             types.size(), m.num_layers);
      for (int l = 0; l < m.num_layers; ++l) {
        const std::string t = types[l].is_string() ? types[l].get<std::string>() : "";
        if (t == "full_attention")
          m.full_layers.push_back(l);
        else if (t != "linear_attention")
          fail("{}: field '{}layer_types[{}]' is {}, expected linear_attention or full_attention",
               origin, where, l, types[l].dump());
      }
    } else {
      const int interval = get_int(j, "full_attention_interval", origin, where);
      if (interval <= 0)
        fail("{}: field '{}full_attention_interval' must be positive", origin, where);
      for (int l = 0; l < m.num_layers; ++l)
        if ((l + 1) % interval == 0) m.full_layers.push_back(l);
    }
    m.ssm_dtype = j.value("mamba_ssm_dtype", std::string("float32"));
  } else if (model_type == "kimi_linear") {
    m.gate = GateKind::kda;
    if (!j.contains("linear_attn_config"))
      fail("{}: missing field '{}linear_attn_config'", origin, where);
    const json& lin = j["linear_attn_config"];
    const std::string lw = where + "linear_attn_config.";
    m.num_key_heads = m.num_value_heads = get_int(lin, "num_heads", origin, lw);
    m.head_k_dim = m.head_v_dim = get_int(lin, "head_dim", origin, lw);
    // No default: Kimi-Linear's modelling code and the engines (vLLM, SGLang) index
    // linear_attn_config["short_conv_kernel_size"] directly, so a config without it fails there.
    m.conv_width = get_int(lin, "short_conv_kernel_size", origin, lw);
    m.conv_layout = ConvLayout::window_first;
    const std::vector<int> full = get_int_list(lin, "full_attn_layers", origin, lw);
    for (size_t i = 0; i < full.size(); ++i) {
      if (full[i] < 1 || full[i] > m.num_layers)
        fail("{}: '{}full_attn_layers[{}]' is {}, outside 1..num_hidden_layers ({}) (1-based)",
             origin, lw, i, full[i], m.num_layers);
      m.full_layers.push_back(full[i] - 1);
    }
    m.full_attention.kind = FullAttentionSpec::Kind::mla;
    m.full_attention.kv_lora_rank = get_int(j, "kv_lora_rank", origin, where);
    m.full_attention.rope_dim = get_int(j, "qk_rope_head_dim", origin, where);
    if (lin.contains("kda_layers")) {
      // Cross-check: kda_layers and full_attn_layers (both 1-based) must partition
      // 1..num_layers: each layer exactly once, in one list.
      const std::vector<int> kda = get_int_list(lin, "kda_layers", origin, lw);
      std::vector<int> seen(static_cast<size_t>(std::max(m.num_layers, 0)) + 1, 0);
      for (int l : m.full_layers)
        if (l >= 0 && l < m.num_layers) seen[static_cast<size_t>(l) + 1] = 2;
      for (size_t i = 0; i < kda.size(); ++i) {
        const int l = kda[i];
        if (l < 1 || l > m.num_layers)
          fail("{}: '{}kda_layers[{}]' is {}, outside 1..num_hidden_layers ({})", origin, lw, i, l,
               m.num_layers);
        if (seen[static_cast<size_t>(l)])
          fail("{}: '{}kda_layers[{}]' is layer {}, already listed in {}", origin, lw, i, l,
               seen[static_cast<size_t>(l)] == 2 ? "'full_attn_layers'" : "'kda_layers'");
        seen[static_cast<size_t>(l)] = 1;
      }
      if (static_cast<int>(kda.size() + m.full_layers.size()) != m.num_layers)
        fail(
            "{}: '{}kda_layers' ({}) and 'full_attn_layers' ({}) do not cover num_hidden_layers "
            "({})",
            origin, lw, kda.size(), m.full_layers.size(), m.num_layers);
    }
  } else {
    fail("{}: unknown model_type '{}' (supported: qwen3_next, qwen3_5*, kimi_linear)", origin,
         model_type);
  }
  complete_layers(m, origin);
  const ParamCount count = hf_param_count(top, m);
  m.params_billion = count.params / 1e9;
  m.active_params_billion = count.active_params / 1e9;
  m.weight_bytes_per_param = count.bytes_per_param;
  if (!count.missing.empty())
    m.weights_unknown = fmt::format("{}: the parameter count needs {}, which the config lacks",
                                    origin, count.missing);
  return m;
}

// Levenshtein distance (insertions, deletions, substitutions of one character each).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string closest_model_name(const std::string& name) {
  std::string best;
  size_t best_d = 0;
  for (const std::string& n : shipped_model_names()) {
    const size_t d = edit_distance(lower(name), lower(n));
    if (best.empty() || d < best_d) {
      best = n;
      best_d = d;
    }
  }
  if (best.empty() || 2 * best_d > std::max(name.size(), best.size())) return "";
  return best;
}

ModelConfig parse_model_config_checked(const json& j, const std::string& origin, int tp);

void validate_model(const ModelConfig& m, const std::string& origin) {
  auto positive = [&](int v, const char* field) {
    if (v <= 0) fail("{}: field '{}' must be positive, got {}", origin, field, v);
  };
  positive(m.num_layers, "num_layers");
  positive(m.num_key_heads, "linear.num_key_heads");
  positive(m.num_value_heads, "linear.num_value_heads");
  positive(m.head_k_dim, "linear.head_k_dim");
  positive(m.head_v_dim, "linear.head_v_dim");
  // The conv state keeps the last W - 1 inputs: W = 1 leaves no state (a 1-wide conv is a
  // per-channel scale), which no model here has and the pools cannot hold.
  if (m.conv_width < 2)
    fail("{}: field 'linear.conv_width' must be >= 2 (the conv state holds W - 1 inputs), got {}",
         origin, m.conv_width);
  positive(m.default_tp, "default_tp");
  positive(m.tp, "tp");
  // A Hugging Face config's name is its '_name_or_path', else its 'model_type'.
  if (m.name.empty())
    fail(
        "{}: field 'name' (Hugging Face: '_name_or_path' or 'model_type') must be a non-empty "
        "string",
        origin);
  if (m.name.size() > kMaxModelName)
    fail("{}: field 'name' has {} characters (at most {})", origin, m.name.size(), kMaxModelName);
  for (size_t i = 0; i < m.name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(m.name[i]);
    if (c < 0x20 || c == 0x7f)  // it is printed in logs and stored in result files
      fail("{}: field 'name' has a control character (code {}) at position {}", origin, int(c), i);
  }
  const FullAttentionSpec& fa = m.full_attention;
  if (fa.kind == FullAttentionSpec::Kind::mla) {
    positive(fa.kv_lora_rank, "full_attention.kv_lora_rank");
    if (fa.rope_dim < 0)
      fail("{}: field 'full_attention.rope_dim' must be >= 0, got {}", origin, fa.rope_dim);
  } else if (!m.full_layers.empty()) {
    positive(fa.num_kv_heads, "full_attention.num_kv_heads");
    positive(fa.head_dim, "full_attention.head_dim");
  } else if (fa.num_kv_heads < 0 || fa.head_dim < 0) {
    fail("{}: fields 'full_attention.num_kv_heads' and 'head_dim' must be >= 0, got {} and {}",
         origin, fa.num_kv_heads, fa.head_dim);
  }
  auto at_most = [&](int v, int limit, const char* field) {
    if (v > limit) fail("{}: field '{}' = {} is larger than {}", origin, field, v, limit);
  };
  at_most(m.num_key_heads, 8192, "linear.num_key_heads");
  at_most(m.num_value_heads, 8192, "linear.num_value_heads");
  at_most(m.head_k_dim, 4096, "linear.head_k_dim");
  at_most(m.head_v_dim, 4096, "linear.head_v_dim");
  at_most(m.conv_width, 64, "linear.conv_width");
  // One layer's state beyond 2^24 elements (64 MiB in fp32; real models hold 2^19) is a typing
  // mistake, and the experiments would fail on allocation instead of naming the fields.
  if (uint64_t(m.num_value_heads) * uint64_t(m.head_v_dim) * uint64_t(m.head_k_dim) >
      (uint64_t(1) << 24))
    fail(
        "{}: one layer's state, linear.num_value_heads x linear.head_v_dim x linear.head_k_dim = "
        "{} x "
        "{} x {}, has "
        "more than 2^24 elements",
        origin, m.num_value_heads, m.head_v_dim, m.head_k_dim);
  if (!(m.params_billion >= 0) || !(m.params_billion <= 1e5))
    fail("{}: field 'params_billion' must be a number of billions in [0, 1e5], got {}", origin,
         m.params_billion);
  if (!(m.active_params_billion >= 0) || !(m.active_params_billion <= 1e5) ||
      (m.params_billion > 0 && !(m.active_params_billion <= m.params_billion)))
    fail("{}: field 'active_params_billion' must be in [0, min(params_billion = {}, 1e5)], got {}",
         origin, m.params_billion, m.active_params_billion);
  if (m.ssm_dtype != "float32" && m.ssm_dtype != "bfloat16" && m.ssm_dtype != "float16")
    fail("{}: field 'ssm_dtype' must be float32, bfloat16 or float16, got '{}'", origin,
         m.ssm_dtype);
  if (m.linear_layers.empty()) fail("{}: the model has no linear-attention layers", origin);
  if (m.num_value_heads % m.num_key_heads != 0)
    fail(
        "{}: linear.num_value_heads ({}) is not a multiple of linear.num_key_heads ({}) (GVA needs "
        "HV "
        "% H == 0)",
        origin, m.num_value_heads, m.num_key_heads);
  if (m.num_key_heads % m.tp != 0 || m.num_value_heads % m.tp != 0) {
    std::string valid;  // the TP degrees that shard this model's heads
    for (int t = 1; t <= m.num_key_heads; ++t)
      if (m.num_key_heads % t == 0 && m.num_value_heads % t == 0)
        valid += (valid.empty() ? "" : ", ") + std::to_string(t);
    fail(
        "{}: TP {} does not divide the key heads ({}) and value heads ({}); this model shards at "
        "TP {}",
        origin, m.tp, m.num_key_heads, m.num_value_heads, valid);
  }
  if (m.conv_dim() % m.tp != 0)
    fail("{}: TP {} does not divide the conv channels ({})", origin, m.tp, m.conv_dim());
  if (m.full_attention.kind == FullAttentionSpec::Kind::mha && !m.full_layers.empty()) {
    positive(m.full_attention.num_kv_heads, "full_attention.num_kv_heads");
    positive(m.full_attention.head_dim, "full_attention.head_dim");
    const int kv = m.full_attention.num_kv_heads;
    if (kv >= m.tp ? kv % m.tp != 0 : m.tp % kv != 0)
      fail("{}: TP {} and {} KV heads can be neither split nor replicated evenly", origin, m.tp,
           kv);
  }
}

ModelConfig parse_model_config(const json& j, const std::string& origin, int tp) {
  try {
    return parse_model_config_checked(j, origin, tp);
  } catch (const json::exception& e) {
    // A field of the wrong JSON type (e.g. a number where a string belongs): name the string
    // fields that are read with a default, the usual culprits.
    for (const char* key : {"name", "source", "ssm_dtype", "mamba_ssm_dtype", "_name_or_path",
                            "model_type", "family"})
      if (j.is_object() && j.contains(key) && !j[key].is_string())
        fail("{}: field '{}' must be a string, got {}", origin, key, j[key].dump());
    for (const char* obj : {"linear", "full_attention", "text_config", "linear_attn_config"})
      if (j.is_object() && j.contains(obj) && !j[obj].is_object())
        fail("{}: field '{}' must be an object, got {}", origin, obj, j[obj].dump());
    fail("{}: a field has the wrong type ({})", origin, e.what());
  }
}

ModelConfig parse_model_config_checked(const json& j, const std::string& origin, int tp) {
  if (!j.is_object()) fail("{}: a model config must be a JSON object", origin);
  ModelConfig m;
  if (j.contains("family")) {
    m = parse_statecheck_schema(j, origin);
  } else if (j.contains("model_type") || j.contains("text_config")) {
    m = parse_hf_config(j, origin);
  } else {
    fail(
        "{}: neither a statecheck model config (field 'family') nor a Hugging Face config.json "
        "(field 'model_type')",
        origin);
  }
  m.tp = tp > 0 ? tp : m.default_tp;
  validate_model(m, origin);
  return m;
}

std::vector<std::string> shipped_model_names() {
  std::vector<std::string> names;
  const fs::path dir = fs::path(data_dir()) / "models";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

ModelConfig load_model(const std::string& name_or_path, int tp) {
  fs::path path(name_or_path);
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    // The Hugging Face layout: a model folder holding config.json.
    path /= "config.json";
    if (!fs::exists(path, ec))
      fail("--model {}: a folder without config.json (give the model's folder or its config file)",
           name_or_path);
  }
  const bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                               path.extension() == ".json" || fs::is_directory(name_or_path, ec);
  if (!looks_like_path) {
    std::string found;
    for (const auto& n : shipped_model_names())
      if (lower(n) == lower(name_or_path)) found = n;
    if (found.empty()) {
      const fs::path models = fs::path(data_dir()) / "models";
      if (shipped_model_names().empty())
        fail(
            "unknown model '{}': the data folder {} holds no shipped models ({} is missing or "
            "empty; check STATECHECK_DATA_DIR, or give a config .json or a folder holding one)",
            name_or_path, data_dir(), models.string());
      std::string known;
      for (const auto& n : shipped_model_names()) known += (known.empty() ? "" : ", ") + n;
      const std::string near = closest_model_name(name_or_path);
      fail("unknown model '{}'{} (shipped: {}; or give a config .json or a folder holding one)",
           name_or_path, near.empty() ? "" : fmt::format("; did you mean '{}'?", near), known);
    }
    path = fs::path(data_dir()) / "models" / (found + ".json");
  }
  check_input_file("--model", path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open model config", path.string());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail("{}: read error", path.string());
  // The JSON parser stops at a NUL byte, which would hide whatever follows it.
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    fail("{}: a NUL byte at offset {}: not a JSON text", path.string(), nul);
  json j;
  try {
    j = json::parse(text);  // the whole file: text after the JSON value is an error
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", path.string(), e.what());
  }
  return parse_model_config(j, path.string(), tp);
}

RecurrenceShape recurrence_shape(const ModelConfig& m) {
  RecurrenceShape s;
  s.H = m.key_heads_shard();
  s.HV = m.value_heads_shard();
  s.dk = m.head_k_dim;
  s.dv = m.head_v_dim;
  s.gate = m.gate;
  s.qk_l2norm = true;
  return s;
}

}  // namespace statecheck
