// Command-line option checks: every value is validated whatever the experiment (a typo in an
// option the experiment does not read must not pass silently), with the option named.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/io/hdf5_file.h"
#include "core/io/summary.h"
#include "core/model/model_config.h"
#include "core/tinylm/tinylm.h"
#include "core/util/error.h"
#include "experiments/experiment.h"
#include "experiments/options.h"
#include "tests/error_of.h"
#include "tests/temp_dir.h"

using namespace statecheck;

namespace {

// The error the command line `statecheck codec <args>` stops with ("" when it parses): an invalid
// value (statecheck::Error) or an unknown or malformed option (boost's error).
std::string error_of(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"statecheck", "codec"};
  argv.insert(argv.end(), args.begin(), args.end());
  try {
    parse_command_line(argv);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Options, DefaultsAreValid) {
  EXPECT_EQ(error_of({}), "");
  const Options o = parse_command_line({"statecheck", "codec"}).options;
  EXPECT_EQ(o.device, Device::cpu);
  EXPECT_FALSE(o.drive.has_value());
  EXPECT_EQ(o.codec.kind, CodecKind::int8);
  EXPECT_EQ(o.codec.scale_dtype, Dtype::fp32);
  EXPECT_EQ(o.strategy, CacheStrategy::extra_buffer);
  EXPECT_EQ(o.temporal_dtype, Dtype::fp32);
  EXPECT_FALSE(o.scale_dtype.has_value());
  EXPECT_EQ(o.conv_dtype, Dtype::bf16);
  EXPECT_EQ(o.trace_bad_lines, BadLines::reject);
}

TEST(Options, OutOfRangeValuesNameTheirOption) {
  const std::pair<std::vector<std::string>, const char*> cases[] = {
      {{"--prefill=-1"}, "--prefill"},
      {{"--decode", "1073741824"}, "--decode"},
      {{"--chain-tokens", "0"}, "--chain-tokens"},
      {{"--chain-tokens", "200"}, "--chain-tokens"},
      {{"--chain-layers=-1"}, "--chain-layers"},
      {{"--active-slots", "0"}, "--active-slots"},
      {{"--ckpt-slots=-1"}, "--ckpt-slots"},
      {{"--gpu-mem-gib", "nan"}, "--gpu-mem-gib"},
      {{"--mem-fraction", "1.5"}, "--mem-fraction"},
      {{"--weights-gib", "nan"}, "--weights-gib"},
      {{"--threads", "100000"}, "--threads"},
      // --mode is read by no experiment: it is not an option (boost's unknown-option error).
      {{"--mode", "int8"}, "unrecognised option '--mode'"},
      {{"--strategy", "lazy"}, "--strategy"},
      {{"--codec", "int4"}, "codec 'int4'"},
      {{"--chunked-prefill", "1"}, "--chunked-prefill"},
      {{"--trace-bad-lines", "maybe"}, "--trace-bad-lines"},
      {{"--device", "tpu"}, "--device"},
      {{"--scale-dtype", "fp8"}, "--scale-dtype must be bf16 or fp32"},
      {{"--active-slots", "4194304"}, "--ckpt-slots absent means 2 x --active-slots"},
      {{"--ckpt-slots", "0"}, "--ckpt-slots 0: the int8 mode needs a checkpoint pool"},
      {{"--policy", "arc"}, "--policy: unknown eviction policy 'arc'"},
      {{"--policy", "lru,lru"}, "repeats a policy"},
      {{"--k-list", "256,128"}, "--k-list: entry 1 (128)"},
      {{"--k-list", "128,x"}, "--k-list: entry 1 ('x')"},
      {{"--states", "x.safetensors"}, "without --drive states"},
      {{"--drive", "nosuch"}, "unknown drive"},
      {{"--trace", "/nonexistent/trace.jsonl"}, "--trace /nonexistent/trace.jsonl: no such file"},
      {{"--trace", "/"}, "--trace /: is a directory"},
      {{"--trace", "/dev/null"}, "--trace /dev/null: not a regular file"},
      {{"--drive", "states", "--states", "/nonexistent.safetensors"},
       "--states /nonexistent.safetensors: no such file"},
      {{"--codec", "int8_fp32_scale", "--scale-dtype", "bf16"},
       "--codec int8_fp32_scale names a fp32 scale but --scale-dtype is bf16"},
  };
  for (const auto& [args, name] : cases) {
    const std::string msg = error_of(args);
    EXPECT_NE(msg.find(name), std::string::npos)
        << "expected an error naming " << name << ", got: " << msg;
  }
}

// Each option's text becomes its typed value once, when the command line is parsed; --codec's
// scale dtype is the one it names, else --scale-dtype, else the temporal dtype.
TEST(Options, TextBecomesTypedValues) {
  const Options o = parse_command_line({"statecheck", "chain", "--device", "cuda", "--drive",
                                        "seed-kda", "--strategy", "no_buffer", "--temporal-dtype",
                                        "bf16", "--trace-bad-lines", "skip", "--codec", "fp8_e4m3"})
                        .options;
  EXPECT_EQ(o.device, Device::cuda);
  ASSERT_TRUE(o.drive.has_value());
  EXPECT_EQ(o.drive->kind, DriveKind::seed_kda);
  EXPECT_EQ(o.strategy, CacheStrategy::no_buffer);
  EXPECT_EQ(o.temporal_dtype, Dtype::bf16);
  EXPECT_EQ(o.scale_dtype_or_default(), Dtype::bf16);
  EXPECT_EQ(o.trace_bad_lines, BadLines::skip);
  EXPECT_EQ(o.codec.kind, CodecKind::fp8_e4m3);
  EXPECT_EQ(o.codec.scale_dtype, Dtype::bf16);
  EXPECT_EQ(parse_command_line(
                {"statecheck", "chain", "--codec", "int8_fp32_scale", "--temporal-dtype", "bf16"})
                .options.codec.scale_dtype,
            Dtype::fp32);
  EXPECT_EQ(parse_command_line({"statecheck", "chain", "--scale-dtype", "bf16"})
                .options.codec.scale_dtype,
            Dtype::bf16);
  const Options s = parse_command_line({"statecheck", "codec", "--drive", "states", "--states",
                                        std::string(STATECHECK_TEST_DATA_DIR) +
                                            "/states/tiny_n2_bf16.safetensors"})
                        .options;
  ASSERT_TRUE(s.drive.has_value());
  EXPECT_EQ(s.drive->kind, DriveKind::states);
  EXPECT_NE(s.drive->states_file.find("tiny_n2_bf16.safetensors"), std::string::npos);
  // --drive tinylm without --model implies the tiny model's config, for the experiments that
  // read --drive.
  EXPECT_EQ(parse_command_line({"statecheck", "codec", "--drive", "tinylm"}).options.model,
            default_tinylm_config_path());
  // --help parses without an experiment, and no values are checked past --seed.
  EXPECT_TRUE(parse_command_line({"statecheck", "--help", "--strategy", "lazy"}).help);
}

// Options an experiment refuses (its registry entry) are an error when given, with its reason;
// an empty --drive, --out, --summary or --scale-dtype too.
TEST(Options, RefusedAndEmptyOptionsAreErrors) {
  auto error_for = [](const std::vector<std::string>& args) {
    try {
      parse_command_line(args);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_for({"statecheck", "kl", "--drive", "seed-kda"}),
            "kl: --drive seed-kda does not apply (kl runs the tiny language model on its "
            "evaluation text)");
  EXPECT_EQ(error_for({"statecheck", "suite", "--drive", "seed-kda"}), "");
  EXPECT_EQ(error_for({"statecheck", "codec", "--drive", ""}), "--drive needs a name");
  EXPECT_EQ(error_for({"statecheck", "codec", "--out", ""}), "--out needs a path");
  EXPECT_EQ(error_for({"statecheck", "codec", "--summary", ""}), "--summary needs a path");
  EXPECT_EQ(error_for({"statecheck", "codec", "--scale-dtype", ""}),
            "--scale-dtype needs a dtype (bf16 or fp32)");
  // An empty value is refused, not read as the option's default.
  EXPECT_EQ(error_for({"statecheck", "replay", "--trace", ""}),
            "--trace needs a value, got an empty one");
  EXPECT_EQ(error_for({"statecheck", "capacity", "--k-list", ""}),
            "--k-list needs a value, got an empty one");
  EXPECT_NE(error_for({"statecheck", "codec", "--ou", "x"}).find("unrecognised option '--ou'"),
            std::string::npos);
}

TEST(Options, CudaIsRefusedForExperimentsWithoutACudaPath) {
  Options o;
  o.experiment = "memory";
  o.device = Device::cuda;
  const auto& reg = experiment_registry();
  for (const auto& e : reg) {
    if (e.name != "memory" && e.name != "replay" && e.name != "firecount") continue;
    EXPECT_FALSE(e.cuda_path) << e.name;
    try {
      require_cuda_if_asked(o, e);
      ADD_FAILURE() << e.name << " accepted --device cuda";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("has no CUDA path"), std::string::npos) << err.what();
    }
  }
}

// --seed is parsed by hand: an unsigned parse would turn "-1" into 2^64 - 1.
TEST(Options, SeedIsANonNegativeInteger) {
  EXPECT_EQ(parse_seed("0"), 0u);
  EXPECT_EQ(parse_seed("18446744073709551615"), 18446744073709551615ull);
  for (const char* bad : {"-1", "", "+3", "1x", " 1", "18446744073709551616", "1e3"}) {
    try {
      parse_seed(bad);
      ADD_FAILURE() << "seed '" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--seed must be an integer in [0, 2^64), got '" +
                                           std::string(bad) + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

// An output name whose extension names another format is refused; the default result file of a
// single run lies under results/runs/ with the time in its name, never at the suite's
// results/<experiment>.h5.
TEST(Options, OutputExtensionsMatchTheirFormatAndSingleRunsAvoidTheSuiteFiles) {
  EXPECT_NE(error_of({"--out", "x.json"}).find("--out x.json: codec writes an HDF5 result file"),
            std::string::npos)
      << error_of({"--out", "x.json"});
  EXPECT_NE(error_of({"--summary", "s.h5"}).find("--summary s.h5: the summary is JSON"),
            std::string::npos);
  EXPECT_EQ(error_of({"--out", "x.h5", "--summary", "s.json"}), "");
  EXPECT_EQ(error_of({"--out", "x.HDF5"}), "");
  const auto suite_error = [](const char* out) {
    try {
      parse_command_line({"statecheck", "suite", "--out", out});
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(suite_error("r.h5").find("suite writes a folder"), std::string::npos);
  EXPECT_EQ(suite_error("results-ci"), "");
  const Options o = parse_command_line({"statecheck", "codec"}).options;
  ASSERT_GE(o.run_stamp.size(), 16u) << o.run_stamp;  // YYYYMMDDTHHMMSSZ[-n]
  EXPECT_EQ(o.run_stamp[8], 'T');
  EXPECT_EQ(o.run_stamp[15], 'Z');
  EXPECT_EQ(o.out_path(), "results/runs/codec-" + o.run_stamp + ".h5");
  EXPECT_EQ(o.out_path(), o.out_path());  // stable within a run
  Options suite_run;
  suite_run.experiment = "suite";
  const auto& reg = experiment_registry();
  EXPECT_EQ(suite_experiment_options(suite_run, reg.front(), "results").out_path(),
            "results/" + reg.front().name + ".h5");
}

// Two single runs in the same second do not share a default result file: when
// results/runs/<experiment>-<stamp>.h5 exists, the stamp gets "-2" (here the files of this second
// and the next two are made first, in a scratch working directory, so the parse meets one).
TEST(Options, SingleRunsInTheSameSecondGetDistinctFiles) {
  const std::filesystem::path dir = ::testing::TempDir() + "same_second_runs";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "results/runs");
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  const std::time_t now = std::time(nullptr);
  for (int d = 0; d < 3; ++d) {
    const std::time_t t = now + d;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
    std::ofstream(std::string("results/runs/memory-") + buf + ".h5") << "taken";
  }
  const Options o = parse_command_line({"statecheck", "memory"}).options;
  const bool fresh = !std::filesystem::exists(o.out_path());
  std::filesystem::current_path(cwd);
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(fresh) << o.out_path();
  EXPECT_EQ(o.run_stamp.substr(o.run_stamp.size() - 2), "-2") << o.run_stamp;
}

// --threads beyond the hardware threads is clamped to them, with a note; within them it is kept.
TEST(Options, ThreadsAreClampedToTheHardwareWithANote) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const CommandLine cl = parse_command_line({"statecheck", "codec", "--threads", "4096"});
  if (hw < 4096) {
    EXPECT_EQ(cl.options.threads, hw);
    ASSERT_FALSE(cl.notes.empty());
    EXPECT_EQ(cl.notes.back(), "--threads 4096 is more than the " + std::to_string(hw) +
                                   " hardware threads of this machine; using " +
                                   std::to_string(hw));
  }
  const CommandLine one = parse_command_line({"statecheck", "codec", "--threads", "1"});
  EXPECT_EQ(one.options.threads, 1);
  EXPECT_TRUE(one.notes.empty());
}

// Outputs are checked against each other (and their partial files), against the inputs and
// against the data directory, whose files runs read without naming them.
TEST(Options, OutputsThatCollideAreRefused) {
  auto error_for = [](Options o, const std::vector<std::string>& outs) {
    try {
      check_run_outputs(o, outs);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string dir = ::testing::TempDir() + "/outputs_collide";
  Options o;
  o.summary = dir + "/./a.h5";
  EXPECT_NE(error_for(o, {dir + "/a.h5"}).find("are one file"), std::string::npos);
  o.summary = dir + "/a.h5.partial";
  EXPECT_NE(error_for(o, {dir + "/a.h5"}).find("are one file"), std::string::npos);
  o.summary = dir + "/a.json";
  EXPECT_EQ(error_for(o, {dir + "/a.h5"}), "");
  o.summary.clear();
  EXPECT_NE(error_for(o, {data_dir() + "/models/qwen3.5-35b-a3b.json"})
                .find("is inside the data directory"),
            std::string::npos);
  o.summary = data_dir() + "/thresholds.json";
  EXPECT_NE(error_for(o, {dir + "/a.h5"}).find("--summary " + o.summary), std::string::npos);
}

// suite passes its options on, except that kl runs the tiny language model without the suite's
// --model and --drive (kl refuses both), and experiments without a CUDA path run on the CPU.
TEST(Suite, ExperimentOptionsKeepTheTinyModelForKl) {
  const ExperimentEntry& kl = *find_experiment("kl");
  const ExperimentEntry& memory = *find_experiment("memory");
  Options base;
  base.model = "kimi-linear-48b-a3b";
  base.model_given = true;
  base.device = Device::cuda;
  base.drive = parse_drive("seed-kda", "");
  const Options k = suite_experiment_options(base, kl, "r");
  EXPECT_FALSE(k.model_given);
  EXPECT_FALSE(k.drive.has_value());
  EXPECT_EQ(k.out, "r/kl.h5");
  EXPECT_EQ(k.device, Device::cuda);
  const Options m = suite_experiment_options(base, memory, "r");
  EXPECT_TRUE(m.model_given);
  EXPECT_EQ(m.model, "kimi-linear-48b-a3b");
  EXPECT_EQ(m.device, Device::cpu);
  EXPECT_EQ(m.experiment, "memory");
  ASSERT_TRUE(m.drive.has_value());
  EXPECT_EQ(m.drive->kind, DriveKind::seed_kda);
}

// A model without full attention (the tiny language model) has no KV cache for the cache
// experiments: suite refuses it before it writes anything.
TEST(Suite, ModelWithoutKvCacheIsRefusedBeforeAnyWork) {
  const std::string dir = ::testing::TempDir() + "suite_tiny/out";
  std::filesystem::remove_all(::testing::TempDir() + "suite_tiny");
  Options o;
  o.experiment = "suite";
  o.model = default_tinylm_config_path();
  o.quick = true;
  o.out = dir;
  try {
    run_suite(o);
    FAIL() << "suite ran on a model without a KV cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no full-attention layers"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(::testing::TempDir() + "suite_tiny"));
  // Two more refusals made before any experiment runs: --drive tinylm (whatever the model), and
  // pools that leave capacity and firecount no KV token.
  o.model = "qwen3.5-35b-a3b";
  o.drive = parse_drive("tinylm", "");
  EXPECT_NE(test_support::error_of([&] { run_suite(o); }).find("suite: --drive tinylm"),
            std::string::npos);
  o.drive.reset();
  o.ckpt_slots = 40000;
  EXPECT_NE(test_support::error_of([&] { run_suite(o); }).find("leave no memory for the KV cache"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(::testing::TempDir() + "suite_tiny"));
}

// replay sizes its pools from the memory budget: a model whose state is a few bytes would get
// billions of slots (each one host memory in the cache model). Refused, naming the model and the
// count, before any pool is allocated.
TEST(Replay, PoolsBeyondTheCacheModelsLimitAreRefused) {
  const std::string dir = ::testing::TempDir() + "replay_tiny_state/";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "model.json")
      << R"({"name": "tinyslot", "family": "gdn", "num_layers": 4, "full_attention_layers": [3],
            "linear": {"num_key_heads": 1, "num_value_heads": 1, "head_k_dim": 1,
                       "head_v_dim": 1, "conv_width": 2},
            "full_attention": {"kind": "mha", "num_kv_heads": 1, "head_dim": 1},
            "params_billion": 0.001})";
  std::ofstream(dir + "trace.jsonl")
      << R"({"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]})"
      << "\n";
  Options o;
  o.experiment = "replay";
  o.model = dir + "model.json";
  o.model_given = true;
  o.tp = 1;
  o.trace = dir + "trace.jsonl";
  o.quick = true;
  const ModelConfig m = load_model(o.model, o.tp);
  H5Writer file(dir + "r.h5");
  Summary summary;
  const std::string e = test_support::error_of([&] { run_replay(o, m, file, summary); });
  EXPECT_NE(e.find("model tinyslot at TP 1"), std::string::npos) << e;
  EXPECT_NE(e.find("holds at most 4194304 per pool"), std::string::npos) << e;
  // suite makes the same check before its first experiment (nothing written).
  o.experiment = "suite";
  o.out = dir + "suite_out";
  const std::string se = test_support::error_of([&] { run_suite(o); });
  EXPECT_NE(se.find("holds at most 4194304 per pool"), std::string::npos) << se;
  EXPECT_FALSE(std::filesystem::exists(dir + "suite_out"));
}

// memory's table of the shipped models is context for the selected model: on an 80 GB card
// Kimi-Linear at TP 1 (89 GiB of weights) does not fit, which must not fail a run about Qwen3.5.
TEST(MemoryExperiment, ShippedModelsThatDoNotFitAreNamedNotFatal) {
  const std::string dir = ::testing::TempDir() + "memory_80gb/";
  std::filesystem::remove_all(dir);
  Options o;
  o.experiment = "memory";
  o.gpu_mem_gib = 74.5;
  o.compare_shipped = true;
  const ModelConfig m = load_model(o.model, o.tp);
  H5Writer file(dir + "m.h5");
  Summary summary;
  run_memory(o, m, file, summary);
  EXPECT_TRUE(summary.has("memory.qwen3.5-35b-a3b.kv_tokens.correct"));
  EXPECT_TRUE(summary.has("memory.kv_tokens.correct"));
  EXPECT_FALSE(summary.has("memory.kimi-linear-48b-a3b.kv_tokens.correct"));
  o.model = "kimi-linear-48b-a3b";  // the selected model itself does not fit: an error
  const std::string e =
      test_support::error_of([&] { run_memory(o, load_model(o.model, o.tp), file, summary); });
  EXPECT_NE(e.find("nothing left for caches"), std::string::npos) << e;
}

// A checkpoint pool larger than the memory: memory reports by how much (the correct KV budget's
// floor of 0 would hide it); capacity and firecount, which need KV tokens, refuse naming the pools.
TEST(MemoryExperiment, StatePoolsBeyondTheMemoryAreReportedOrRefused) {
  const std::string dir = ::testing::TempDir() + "memory_overcommit/";
  std::filesystem::remove_all(dir);
  Options o;
  o.ckpt_slots = 40000;  // 40000 x 4,423,680 B = 164.8 GiB > 99.26 GiB for caches
  const ModelConfig m = load_model(o.model, o.tp);
  {
    H5Writer file(dir + "m.h5");
    Summary summary;
    run_memory(o, m, file, summary);
    // By hand: (A + 1) active and (C + 1) checkpoint slots (slot 0 included) of 16,097,280 and
    // 4,423,680 bytes, against 141 GB x 0.88 - bf16 weights / TP for caches.
    const double rest = 141e9 * 0.88 - m.params_billion * 1e9 * 2.0 / m.tp;
    const double excess = (256.0 + 1) * 16097280 + (40000.0 + 1) * 4423680 - rest;
    EXPECT_NEAR(summary.get("memory.state_pools_over_cache_memory_gib"), excess / (1 << 30), 1e-9);
    EXPECT_EQ(summary.get("memory.kv_tokens.correct"), 0.0);
  }
  for (const ExperimentFn& run : {ExperimentFn(run_capacity), ExperimentFn(run_firecount)}) {
    H5Writer file(dir + "c.h5");
    Summary summary;
    o.quick = true;
    const std::string e = test_support::error_of([&] { run(o, m, file, summary); });
    EXPECT_NE(e.find("40000 checkpoint slots, 164.80 GiB) leave no memory for the KV cache"),
              std::string::npos)
        << e;
  }
}

// The registry's declarations name options of the command line that only some experiments read;
// each such option is read by some experiment (an option nobody reads, as --mode was, is caught
// here), and each refused option can be reset for the suite.
TEST(Options, DeclarationsNameExperimentOptions) {
  const std::vector<std::string> names = experiment_option_names();
  auto declared = [&](const std::string& option) {
    return std::find(names.begin(), names.end(), option) != names.end();
  };
  for (const std::string& option : names) {
    bool read = false;
    for (const ExperimentEntry& e : experiment_registry())
      read = read || std::find(e.reads.begin(), e.reads.end(), option) != e.reads.end();
    EXPECT_TRUE(read) << "--" << option << " is read by no experiment";
    // A real option: parsing it gives no unknown-option error (values aside).
    EXPECT_EQ(error_of({"--" + option}).find("unrecognised"), std::string::npos) << option;
  }
  for (const ExperimentEntry& e : experiment_registry()) {
    for (const std::string& option : e.reads) EXPECT_TRUE(declared(option)) << e.name << option;
    for (const OptionNote& n : e.sets_itself) EXPECT_TRUE(declared(n.option)) << e.name;
    for (const OptionNote& n : e.refuses) {
      EXPECT_TRUE(declared(n.option)) << e.name;
      Options o;
      EXPECT_EQ(test_support::error_of([&] { reset_option(o, n.option); }), "") << n.option;
    }
  }
}

// The notes for options an experiment does not read name every experiment that does, in order,
// and say how the experiment sets the option itself where it does.
TEST(Options, UnreadOptionNotesNameEveryReader) {
  EXPECT_EQ(unread_option_notes("memory", {"trace"}),
            std::vector<std::string>{"--trace is not read by memory (it is read by replay)"});
  EXPECT_EQ(unread_option_notes("firecount", {"strategy"}),
            std::vector<std::string>{"--strategy is not read by firecount (firecount runs both "
                                     "no_buffer and extra_buffer; it is read by capacity and "
                                     "replay)"});
  EXPECT_EQ(unread_option_notes("replay", {"active-slots"}),
            std::vector<std::string>{"--active-slots is not read by replay (replay sizes its pools "
                                     "from the memory budget, at equal memory; it is read by "
                                     "memory, capacity and firecount)"});
  EXPECT_EQ(unread_option_notes("codec", {"gpu-mem-gib", "drive", "experiment"}),
            std::vector<std::string>{"--gpu-mem-gib is not read by codec (it is read by memory, "
                                     "capacity, firecount and replay)"});
  EXPECT_TRUE(unread_option_notes("memory", {"active-slots", "temporal-dtype", "model"}).empty());
  // --temporal-dtype is codec's scale dtype when --scale-dtype is not given.
  EXPECT_TRUE(unread_option_notes("codec", {"temporal-dtype", "scale-dtype"}).empty());
  EXPECT_EQ(unread_option_notes("kl", {"scale-dtype"}),
            std::vector<std::string>{"--scale-dtype is not read by kl (it is read by codec, chain, "
                                     "bench, memory, capacity, firecount and replay)"});
  EXPECT_TRUE(unread_option_notes("suite", {"trace", "strategy", "active-slots"}).empty());
  EXPECT_EQ(
      unread_option_notes("memory", {"seed", "threads", "quick"}),
      (std::vector<std::string>{
          "--seed is not read by memory (it is read by codec, chain, inloop, bench, "
          "capacity and firecount)",
          "--threads is not read by memory (it is read by codec, chain, inloop, reference and kl)",
          "--quick is not read by memory (it is read by codec, chain, inloop, bench, "
          "capacity, firecount, replay and kl)"}));
  EXPECT_TRUE(unread_option_notes("kl", {"threads", "quick"}).empty());
  EXPECT_EQ(unread_option_notes("kl", {"seed"}).size(), 1u);
}

namespace {

Summary run_quick(const std::string& experiment, const Options& base,
                  const test_support::TempDir& dir) {
  Options o = base;
  o.experiment = experiment;
  o.quick = true;
  const auto& reg = experiment_registry();
  const auto it = std::find_if(reg.begin(), reg.end(),
                               [&](const ExperimentEntry& e) { return e.name == experiment; });
  EXPECT_NE(it, reg.end()) << experiment;
  H5Writer file(dir.file(experiment + ".h5"));
  Summary summary;
  it->run(o, load_model(o.model, o.tp), file, summary);
  return summary;
}

// Wall times and speeds (replay.*.wall_s, replay.bench.*) change from run to run: not compared.
bool timing_key(const std::string& k) {
  return k.find("wall_s") != std::string::npos || k.find(".bench.") != std::string::npos;
}

bool same_values(const Summary& a, const Summary& b) {
  if (a.values().size() != b.values().size()) return false;
  for (const auto& [k, v] : a.values()) {
    if (timing_key(k)) continue;
    if (!b.has(k)) return false;
    const double w = b.values().at(k);
    if (!(v == w || (std::isnan(v) && std::isnan(w)))) return false;
  }
  return true;
}

}  // namespace

// What the notes claim, measured: an option noted as unread leaves the experiment's summary as it
// was (timings aside), and the pool sizes and budget options that memory reads change its
// summary (firecount reads them too, but its quick workload never fills the pools they size).
// Run on the quick protocols of memory (every cache option with a second valid value, --seed and
// --threads), firecount (the options noted for it), replay without payloads (the pool sizes it
// sets itself, --seed and --threads) and a short codec protocol (--temporal-dtype); kl's notes are
// checked by text above (it reads no dtype).
TEST(Options, OptionsNotedAsUnreadLeaveTheSummaryUnchanged) {
  const test_support::TempDir dir("unread_options");
  struct Change {
    const char* option;
    std::function<void(Options&)> set;
    bool changes_memory;  // memory reads it and its summary depends on it
  };
  const Change changes[] = {
      {"active-slots", [](Options& o) { o.active_slots = 200; }, true},
      {"ckpt-slots", [](Options& o) { o.ckpt_slots = 300; }, true},
      {"strategy", [](Options& o) { o.strategy = CacheStrategy::no_buffer; }, false},
      {"temporal-dtype", [](Options& o) { o.temporal_dtype = Dtype::bf16; }, true},
      {"gpu-mem-gib", [](Options& o) { o.gpu_mem_gib = 120.0; }, true},
      {"mem-fraction", [](Options& o) { o.mem_fraction = 0.8; }, true},
      {"weights-gib", [](Options& o) { o.weights_gib = 30.0; }, true},
      {"compare-shipped", [](Options& o) { o.compare_shipped = true; }, true},
      {"chunk-granularity", [](Options& o) { o.chunk_granularity = 128; }, false},
      {"track-interval", [](Options& o) { o.track_interval = 128; }, false},
      {"chunked-prefill", [](Options& o) { o.chunked_prefill = 4096; }, false},
      {"max-running", [](Options& o) { o.max_running = 8; }, false},
      {"seed", [](Options& o) { o.seed = 7; }, false},
      {"threads", [](Options& o) { o.threads = 1; }, false},
  };
  for (const std::string experiment : {"memory", "firecount"}) {
    const Summary base = run_quick(experiment, Options{}, dir);
    for (const auto& c : changes) {
      const bool noted = !unread_option_notes(experiment, {c.option}).empty();
      if (experiment == "firecount" && !noted) continue;  // nothing to measure there (above)
      SCOPED_TRACE(experiment + " --" + c.option);
      Options o;
      c.set(o);
      const Summary changed = run_quick(experiment, o, dir);
      if (noted) {
        EXPECT_TRUE(same_values(base, changed)) << "noted as unread, but the summary changed";
      }
      if (experiment == "memory" && c.changes_memory) {
        EXPECT_TRUE(unread_option_notes(experiment, {c.option}).empty());
        EXPECT_FALSE(same_values(base, changed)) << "read, but the summary did not change";
      }
    }
  }
  Options bookkeeping;  // replay's pools and hits without the state payloads: 4x faster
  bookkeeping.no_payload = true;
  const Summary base = run_quick("replay", bookkeeping, dir);
  for (const std::string option : {"active-slots", "ckpt-slots", "seed", "threads"}) {
    const Change& c = *std::find_if(std::begin(changes), std::end(changes),
                                    [&](const Change& x) { return x.option == option; });
    SCOPED_TRACE("replay --" + option);
    Options o = bookkeeping;
    c.set(o);
    ASSERT_FALSE(unread_option_notes("replay", {c.option}).empty());
    EXPECT_TRUE(same_values(base, run_quick("replay", o, dir)));
  }
  // The state dtypes: codec reads --temporal-dtype (its scale dtype without --scale-dtype), on a
  // short protocol.
  Options fp32, bf16;
  fp32.prefill = bf16.prefill = 16;
  fp32.decode = bf16.decode = 4;
  bf16.temporal_dtype = Dtype::bf16;
  EXPECT_TRUE(unread_option_notes("codec", {"temporal-dtype"}).empty());
  EXPECT_FALSE(same_values(run_quick("codec", fp32, dir), run_quick("codec", bf16, dir)));
}

// The threshold table gives each row's distance from its limit relative to the limit and on which
// side: an upper bound 0.5 < 1 is 50% below it, a lower bound 2 > 1.6 25% above it, a failing
// upper bound 1.2 < 1 20% above it (and counted), 1.001 < 1 0.1% above it, a negative upper
// bound -3 < -2 50% below it, a value at its limit "at the limit"; a zero limit gets no ratio.
TEST(Thresholds, TableGivesTheMarginAndItsSide) {
  Summary summary;
  summary.set("a", 0.5), summary.set("b", 2.0), summary.set("c", 1.2), summary.set("d", 0.0);
  summary.set("e", 1.001), summary.set("f", -3.0), summary.set("g", 2.5);
  std::vector<ThresholdRow> rows(7);
  rows[0].key = "a", rows[0].op = "<", rows[0].limit = 1.0, rows[0].reason = "ra";
  rows[1].key = "b", rows[1].op = ">", rows[1].limit = 1.6, rows[1].reason = "rb";
  rows[2].key = "c", rows[2].op = "<", rows[2].limit = 1.0, rows[2].reason = "rc";
  rows[3].key = "d", rows[3].op = "<=", rows[3].limit = 0.0, rows[3].reason = "rd";
  rows[4].key = "e", rows[4].op = "<", rows[4].limit = 1.0, rows[4].reason = "re";
  rows[5].key = "f", rows[5].op = "<", rows[5].limit = -2.0, rows[5].reason = "rf";
  rows[6].key = "g", rows[6].op = "<=", rows[6].limit = 2.5, rows[6].reason = "rg";
  ::testing::internal::CaptureStdout();
  const int failures = print_threshold_table(summary, rows, /*gate=*/true);
  std::fflush(stdout);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(failures, 2);
  auto line_of = [&](const std::string& key) {
    for (size_t at = 0; (at = out.find("\n", at)) != std::string::npos; ++at) {
      const size_t end = out.find('\n', at + 1);
      const std::string line = out.substr(at + 1, end - at - 1);
      if (line.find(" " + key + " ") != std::string::npos) return line;
    }
    return std::string();
  };
  EXPECT_NE(line_of("a").find("50% below the limit"), std::string::npos) << out;
  EXPECT_NE(line_of("b").find("25% above the limit"), std::string::npos) << out;
  EXPECT_NE(line_of("c").find("20% above the limit"), std::string::npos) << out;
  EXPECT_EQ(line_of("c").rfind("  FAIL", 0), 0u) << out;
  EXPECT_NE(line_of("d").find("no margin"), std::string::npos) << out;
  EXPECT_NE(line_of("e").find("0.1% above the limit"), std::string::npos) << out;
  EXPECT_NE(line_of("f").find("50% below the limit"), std::string::npos) << out;
  EXPECT_NE(line_of("g").find("at the limit"), std::string::npos) << out;
  EXPECT_EQ(line_of("g").rfind("  ok", 0), 0u) << out;
  EXPECT_NE(out.find("reason for the limit: rc"), std::string::npos) << out;
}
