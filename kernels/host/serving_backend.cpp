#include "kernels/host/serving_backend.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/drive/drive.h"
#include "core/dtype/bf16.h"
#include "core/util/error.h"
#include "kernels/chunked_delta/chunked_prefill.h"
#include "kernels/codec/checkpoint_codec.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device.h"
#include "kernels/common/mma_peak.h"
#include "kernels/host/layer_upload.h"
#include "kernels/working_state/ws_decode.h"
#include "kernels/working_state/ws_decode_reference.h"

namespace statecheck::cuda {

namespace {

class CudaServingBackend : public ServingBackend {
 public:
  CudaServingBackend(const ServingShape& s, int64_t max_prompt, uint64_t seed)
      : s_(s),
        slots_(s.parallel + 2),
        slot_elems_(static_cast<size_t>(s.layer.HV) * s.layer.dv * s.layer.dk),
        layer_elems_(slot_elems_ * slots_),
        copy_(parse_codec(dtype_name(s.temporal))),
        ws_code_bytes_(ws_code_bytes(s.working)),
        ws_scale_bytes_(ws_scale_bytes(s.working)) {
    if (s.temporal != Dtype::fp32 && s.temporal != Dtype::bf16)
      fail("serving backend: temporal dtype {} is not fp32 or bf16", dtype_name(s.temporal));
    if (has_working() && !ws_decode_supports(s.working))
      fail("serving backend: working-state format {} has no decode kernel", s.working.name());
    if (has_working() && !ws_decode_supports_head(s.layer.dk, s.layer.dv))
      fail("serving backend: the working-state decode does not take heads of d_k {}, d_v {}",
           s.layer.dk, s.layer.dv);
    geo_.L = s.layers, geo_.HV = s.layer.HV, geo_.dv = s.layer.dv, geo_.dk = s.layer.dk;
    geo_.conv_elems = s.conv_elems;
    const size_t L = static_cast<size_t>(s.layers);
    active_.resize(L * layer_elems_ * dtype_bytes(s.temporal));
    active_.fill_bytes(0);
    active_conv_.resize(L * slots_ * s.conv_elems);
    ck_values_.resize(L * 2 * slot_elems_ * s.checkpoint.value_bytes());
    ck_scales_.resize(L * 2 * s.layer.HV * s.layer.dk * s.checkpoint.scale_bytes());
    ck_conv_.resize(L * 2 * s.conv_elems);
    if (has_working()) {
      ws_codes_.resize(L * slots_ * slot_elems_ * ws_code_bytes_);
      ws_codes_.fill_bytes(0);
      ws_scales_.resize(std::max<size_t>(16, L * slots_ * ws_slot_scales() * ws_scale_bytes_));
      ws_scales_.fill_bytes(0);
      scratch_.resize(L * layer_elems_);
      scratch_.fill_bytes(0);
    }
    av_ = {active_.data(), nullptr, active_conv_.data(), slots_};
    cv_ = {ck_values_.data(), ck_scales_.data(), ck_conv_.data(), 2};
    if (has_working()) {
      ws_geo_ = geo_;
      ws_geo_.conv_elems = 0;
      ws_view_ = {ws_codes_.data(), ws_scale_bytes_ ? ws_scales_.data() : nullptr, nullptr, slots_};
      scratch_view_ = {scratch_.data(), nullptr, nullptr, slots_};
      const WorkingStateKind k = s.working.kind;
      const bool int8 = k == WorkingStateKind::int8 || k == WorkingStateKind::int8_sr;
      const bool fp8 = k == WorkingStateKind::fp8_e4m3 || k == WorkingStateKind::fp8_e4m3_sr;
      const char* codec = int8 ? "int8" : fp8 ? "fp8_e4m3" : "bf16";
      ws_codec_ = parse_codec(codec, s.working.bf16_scale ? Dtype::bf16 : Dtype::fp32);
    }

    // One synthetic stream long enough for `parallel` of the longest prompt.
    const int64_t T_all = std::max<int64_t>(1, max_prompt) * s.parallel;
    const DriveKind kind =
        s.layer.gate == GateKind::gdn ? DriveKind::init_gdn : DriveKind::init_kda;
    host_in_ = synthetic_inputs(kind, s.layer, seed, 0, static_cast<int>(T_all));
    in_ = upload_layer_inputs(s.layer, host_in_);
    // The chunked prefill's workspace for the largest launch (parallel sequences, T_all tokens),
    // when the chunked kernel takes the layer's heads at all (an fp32 pool: the scratch's dtype).
    GatedDeltaPoolArgs widest;
    widest.num_seqs = s.parallel, widest.HV = s.layer.HV, widest.dk = s.layer.dk;
    widest.dv = s.layer.dv, widest.state_dtype = Dtype::fp32;
    if (chunked_prefill_supported(widest))
      chunk_ws_.resize(chunked_prefill_workspace_bytes(widest, T_all));
    std::vector<int32_t> ids(s.parallel);
    for (int i = 0; i < s.parallel; ++i) ids[i] = i + 1;
    ids_ = to_device(ids);
    one_ = to_device(std::vector<int32_t>{1});
    cached_slot_ = to_device(std::vector<int32_t>{slots_ - 1});
    cached_srcs_ = to_device(std::vector<int32_t>(s.parallel, slots_ - 1));
    ckpt_srcs_ = to_device(std::vector<int32_t>(s.parallel, 1));
    batch_dst_.resize(s.parallel);
    cu_.resize(s.parallel + 1);
    ws_cu_.resize(s.parallel + 1);
    ws_pos_.resize(s.parallel);
    error_.resize(4);
    error_.fill_bytes(0);
    STATECHECK_CUDA_CHECK(cudaEventCreate(&e0_));
    STATECHECK_CUDA_CHECK(cudaEventCreate(&e1_));
    // The cached state, prefilled once and donated once, so that hits restore real numbers; the
    // working-state mode's cached slot holds the same prefix: its prefill but the last token into
    // the fp32 scratch, the last token through the working-state decode.
    const int64_t prompt = std::max<int64_t>(1, max_prompt);
    prefill({prompt}, cached_slot_.data());
    donate();
    if (has_working()) {
      prefill_working({prompt}, cached_slot_.data(), cached_slot_.data(), slots_ - 1, nullptr);
      check_ws_decode_error(error_.data(), stream_);
    }
  }
  ~CudaServingBackend() override {
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
  }

  std::string description() const override { return device_description(); }

  double donate_ms(RestoreFrom into) override {
    if (into == RestoreFrom::active_pool)
      fail("serving backend: the single-pool mode donates nothing (its state stays in its slot)");
    if (into == RestoreFrom::working_pool) need_working();
    STATECHECK_CUDA_CHECK(cudaEventRecord(e0_, stream_));
    if (into == RestoreFrom::checkpoint_pool)
      donate();
    else  // the same copy as a donate of slot 1 into the cached slot, which it keeps intact
      ws_copy(cached_slot_.data(), one_.data(), 1);
    STATECHECK_CUDA_CHECK(cudaEventRecord(e1_, stream_));
    return elapsed_ms();
  }

  double serve_ms(const ServedRequest& r, RestoreFrom from) override {
    STATECHECK_CUDA_CHECK(cudaEventRecord(e0_, stream_));
    if (from == RestoreFrom::working_pool) {
      serve_working({r}, nullptr);
    } else {
      if (r.cached_tokens > 0) {
        if (from == RestoreFrom::checkpoint_pool)
          checkpoint_load(geo_, cv_, s_.checkpoint, av_, s_.temporal, one_.data(), one_.data(), 1,
                          stream_);
        else
          checkpoint_load(geo_, av_, copy_, av_, s_.temporal, cached_slot_.data(), one_.data(), 1,
                          stream_);
      }
      prefill({r.prompt_len - r.cached_tokens}, one_.data());
    }
    STATECHECK_CUDA_CHECK(cudaEventRecord(e1_, stream_));
    const double ms = elapsed_ms();
    if (from == RestoreFrom::working_pool) check_ws_decode_error(error_.data(), stream_);
    return ms;
  }

  double serve_batches_ms(const std::vector<ServedRequest>& requests, RestoreFrom from) override {
    const size_t parallel = static_cast<size_t>(s_.parallel);
    STATECHECK_CUDA_CHECK(cudaEventRecord(e0_, stream_));
    for (size_t b = 0; b < requests.size(); b += parallel) {
      if (from == RestoreFrom::working_pool) {
        const size_t e = std::min(requests.size(), b + parallel);
        serve_working(std::vector<ServedRequest>(requests.begin() + b, requests.begin() + e),
                      nullptr);
        continue;
      }
      std::vector<int64_t> lens;
      std::vector<int32_t> hit_slots;
      for (size_t i = b; i < std::min(requests.size(), b + parallel); ++i) {
        lens.push_back(requests[i].prompt_len - requests[i].cached_tokens);
        if (requests[i].cached_tokens > 0) hit_slots.push_back(static_cast<int32_t>(i - b + 1));
      }
      if (!hit_slots.empty()) {
        STATECHECK_CUDA_CHECK(cudaMemcpyAsync(batch_dst_.data(), hit_slots.data(),
                                              hit_slots.size() * 4, cudaMemcpyHostToDevice,
                                              stream_));
        const int nh = static_cast<int>(hit_slots.size());
        if (from == RestoreFrom::checkpoint_pool)
          checkpoint_load(geo_, cv_, s_.checkpoint, av_, s_.temporal, ckpt_srcs_.data(),
                          batch_dst_.data(), nh, stream_);
        else
          checkpoint_load(geo_, av_, copy_, av_, s_.temporal, cached_srcs_.data(),
                          batch_dst_.data(), nh, stream_);
      }
      prefill(lens, ids_.data());
    }
    STATECHECK_CUDA_CHECK(cudaEventRecord(e1_, stream_));
    const double ms = elapsed_ms();
    if (from == RestoreFrom::working_pool) check_ws_decode_error(error_.data(), stream_);
    return ms;
  }

  WorkingStateCheck check_working_state(const ServedRequest& r) override {
    need_working();
    // The state layer 0's last token starts from, as the reference needs it: the chunked
    // prefill's fp32 result in the scratch (read after the launch: the working-state decode does
    // not write it), from the cached slot decoded there on a hit, from zero on a miss.
    HostWsBatch b = reference_batch();
    const size_t codes = slot_elems_ * ws_code_bytes_, scales = ws_slot_scales() * ws_scale_bytes_;
    b.codes.resize(codes);
    b.scales.resize(scales);
    const bool hit = r.cached_tokens > 0;
    if (!hit)  // layer 0's miss starts from the zero state (timed misses reuse the scratch)
      STATECHECK_CUDA_CHECK(
          cudaMemsetAsync(scratch_.data() + slot_elems_, 0, slot_elems_ * 4, stream_));
    const int64_t n = 1;
    DeviceBuffer<uint16_t> o(static_cast<size_t>(n) * s_.layer.HV * s_.layer.dv);
    o.fill_bytes(0xFF);
    serve_working({r}, o.data());
    check_ws_decode_error(error_.data(), stream_);
    STATECHECK_CUDA_CHECK(cudaStreamSynchronize(stream_));
    b.init_state.resize(slot_elems_);
    download(b.init_state.data(), scratch_.data() + slot_elems_, slot_elems_ * 4);
    // The reference's token: the last of the suffix (placed from the stream's start) on a hit,
    // token P - 1 on a miss (serve_working's layout), at position P - 1.
    const int64_t t0 = hit ? r.prompt_len - r.cached_tokens - 1 : r.prompt_len - 1;
    b.slot_ids = {0};
    b.cu_seqlens = {0, static_cast<int32_t>(n)};
    b.positions = {static_cast<int32_t>(r.prompt_len - 1)};
    take_tokens(b, t0, n);
    std::vector<uint16_t> o_ref(o.size(), 0xFFFF);
    const std::vector<WsRefusal> refused = ws_decode_reference(b, o_ref);
    if (!refused.empty())
      fail("serving backend: the working-state reference refused head {} of the check",
           refused.front().head);
    std::vector<uint8_t> got_codes(codes), got_scales(scales);
    download(got_codes.data(), ws_codes_of(0) + codes, codes);
    if (scales) download(got_scales.data(), ws_scales_of(0) + scales, scales);
    const std::vector<uint16_t> got_o = o.download();
    WorkingStateCheck c;
    const int cb = ws_code_bytes_, sb = std::max(ws_scale_bytes_, 1);
    for (size_t e = 0; e < codes; e += cb)
      c.differing += std::memcmp(&got_codes[e], &b.codes[e], cb) != 0;
    for (size_t e = 0; e < scales; e += sb)
      c.differing += std::memcmp(&got_scales[e], &b.scales[e], sb) != 0;
    for (size_t e = 0; e < got_o.size(); ++e) c.differing += got_o[e] != o_ref[e];
    c.compared = static_cast<int64_t>(codes / cb + scales / sb + got_o.size());
    return c;
  }

 private:
  bool has_working() const { return s_.working.kind != WorkingStateKind::fp32; }
  void need_working() const {
    if (!has_working()) fail("serving backend: this backend has no working-state pool");
  }

  size_t ws_slot_scales() const { return static_cast<size_t>(s_.layer.HV) * s_.layer.dk; }
  // Layer l's codes [slots, HV, d_v, d_k] and scales [slots, HV, d_k] in the working-state pool
  // (scales null for a format without them).
  uint8_t* ws_codes_of(int l) {
    return ws_codes_.data() + static_cast<size_t>(l) * slots_ * slot_elems_ * ws_code_bytes_;
  }
  uint8_t* ws_scales_of(int l) {
    return ws_scale_bytes_ ? ws_scales_.data() + static_cast<size_t>(l) * slots_ *
                                                     ws_slot_scales() * ws_scale_bytes_
                           : nullptr;
  }

  // A one-slot reference batch of layer 0 with the kernel launches' shape, format and key.
  HostWsBatch reference_batch() const {
    HostWsBatch b;
    b.H = s_.layer.H, b.HV = s_.layer.HV, b.dk = s_.layer.dk, b.dv = s_.layer.dv;
    b.gate = s_.layer.gate, b.qk_l2norm = s_.layer.qk_l2norm, b.scale = s_.layer.scale;
    b.format = s_.working;
    b.seed = kWsSeed;
    b.layer = 0;
    return b;
  }

  // Tokens [t0, t0 + n) of the stream into b, as the kernel reads them (bf16 q, k, v).
  void take_tokens(HostWsBatch& b, int64_t t0, int64_t n) const {
    const RecurrenceShape& sh = s_.layer;
    auto rows = [&](const std::vector<float>& a, size_t width) {
      return std::vector<float>(a.begin() + t0 * width, a.begin() + (t0 + n) * width);
    };
    b.q = bf16_bits(rows(host_in_.q, static_cast<size_t>(sh.H) * sh.dk));
    b.k = bf16_bits(rows(host_in_.k, static_cast<size_t>(sh.H) * sh.dk));
    b.v = bf16_bits(rows(host_in_.v, static_cast<size_t>(sh.HV) * sh.dv));
    b.g = rows(host_in_.g, sh.gate_width());
    b.beta = rows(host_in_.beta, sh.HV);
  }

  static void download(void* host, const void* device, size_t bytes) {
    STATECHECK_CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
  }

  // Working-slot copies dst[i] = src[i] of every layer.
  void ws_copy(const int32_t* src_slots, const int32_t* dst_slots, int n) {
    for (int l = 0; l < s_.layers; ++l) {
      uint8_t *c = ws_codes_of(l), *sc = ws_scales_of(l);
      ws_slot_copy(s_.working, s_.layer.HV, s_.layer.dk, s_.layer.dv, c, sc, c, sc, src_slots,
                   dst_slots, n, stream_);
    }
  }

  // Working-state decode launches, one per layer, over the sequences of `lens` (packed from
  // token t0 of the stream) at absolute positions `pos`, in working slots `slot_ids`: from the
  // slots, or from the fp32 states of layer l at init + l * init_layer_stride ([n, HV, d_v, d_k])
  // when init is given; layer 0's outputs to `o` (may be null).
  void ws_decode_layers(const std::vector<int64_t>& lens, const std::vector<int64_t>& pos,
                        int64_t t0, const int32_t* slot_ids, const float* init,
                        size_t init_layer_stride, uint16_t* o) {
    std::vector<int32_t> cu(lens.size() + 1, 0), p(pos.size());
    for (size_t i = 0; i < lens.size(); ++i) {
      cu[i + 1] = cu[i] + static_cast<int32_t>(lens[i]);
      p[i] = static_cast<int32_t>(pos[i]);
    }
    STATECHECK_CUDA_CHECK(
        cudaMemcpyAsync(ws_cu_.data(), cu.data(), cu.size() * 4, cudaMemcpyHostToDevice, stream_));
    STATECHECK_CUDA_CHECK(
        cudaMemcpyAsync(ws_pos_.data(), p.data(), p.size() * 4, cudaMemcpyHostToDevice, stream_));
    WsDecodeArgs a;
    a.num_seqs = static_cast<int>(lens.size());
    a.H = s_.layer.H, a.HV = s_.layer.HV, a.dk = s_.layer.dk, a.dv = s_.layer.dv;
    a.gate = s_.layer.gate, a.qk_l2norm = s_.layer.qk_l2norm, a.scale = s_.layer.scale;
    a.format = s_.working;
    a.pool_slots = slots_;
    a.slot_ids = slot_ids;
    a.cu_seqlens = ws_cu_.data();
    a.positions = ws_pos_.data();
    a.seed = kWsSeed;
    const size_t t = static_cast<size_t>(t0);
    a.q = in_.q.data() + t * s_.layer.H * s_.layer.dk;
    a.k = in_.k.data() + t * s_.layer.H * s_.layer.dk;
    a.v = in_.v.data() + t * s_.layer.HV * s_.layer.dv;
    a.g = in_.g.data() + t * s_.layer.gate_width();
    a.beta = in_.beta.data() + t * s_.layer.HV;
    a.error_info = error_.data();
    a.max_tokens = std::all_of(lens.begin(), lens.end(), [](auto n) { return n <= 1; }) ? 1 : 0;
    for (int l = 0; l < s_.layers; ++l) {
      a.layer = l;
      a.codes = ws_codes_of(l);
      a.scales = ws_scales_of(l);
      a.init_state = init ? init + l * init_layer_stride : nullptr;
      a.o = l == 0 ? o : nullptr;
      ws_decode(a, stream_);
    }
  }

  // Prompts (a miss: from the scratch's state, zero when it matters) or suffixes (a hit: from
  // the cached state decoded into the scratch) of `lens` tokens in the working-state mode, into
  // working slots `slot_ids` (request j's fp32 scratch is slot first_scratch + j): every layer
  // prefills all but the last token with the chunked kernel into the scratch, in fp32 as engines
  // prefill, then the last token runs through the working-state decode from it (init_state). A
  // one-request launch reads that token at its place in the stream (lens - 1); a batch reads its
  // last tokens from the stream's start (the same work).
  // Outputs of layer 0 to `o` when given.
  // `scratch_ids` (device) lists the scratch slots first_scratch, first_scratch + 1, ...
  // `first_pos[i]` (empty: all 0) is the absolute position of request i's first token here.
  void prefill_working(const std::vector<int64_t>& lens, const int32_t* slot_ids,
                       const int32_t* scratch_ids, int first_scratch, uint16_t* o,
                       const std::vector<int64_t>& first_pos = {}) {
    std::vector<int64_t> head(lens.size()), ones(lens.size(), 1), pos(lens.size());
    for (size_t i = 0; i < lens.size(); ++i)
      head[i] = lens[i] - 1, pos[i] = (first_pos.empty() ? 0 : first_pos[i]) + lens[i] - 1;
    prefill(head, scratch_ids, reinterpret_cast<uint8_t*>(scratch_.data()), Dtype::fp32);
    const int64_t t0 = lens.size() == 1 ? lens[0] - 1 : 0;
    ws_decode_layers(ones, pos, t0, slot_ids, scratch_.data() + first_scratch * slot_elems_,
                     layer_elems_, o);
  }

  // The requests of one batch (at most `parallel`) in the working-state mode: the h hits in
  // slots 1 .. h decode the cached working slot into their scratch slots 1 .. h (checkpoint_load,
  // the working format's decode) and run their suffix through prefill_working (from the stream's
  // start, at positions cached_tokens ...); the misses run prefill_working in slots and scratch
  // slots h + 1 .... Slot lists are the preallocated ids_ and cached_srcs_, so nothing is
  // allocated or uploaded but the offsets. Outputs of layer 0 to `o` when given (a batch of one
  // request only).
  void serve_working(const std::vector<ServedRequest>& rs, uint16_t* o) {
    need_working();
    std::vector<int64_t> hit_lens, hit_pos, miss_lens;
    for (const ServedRequest& r : rs) {
      if (r.cached_tokens > 0) {
        hit_lens.push_back(r.prompt_len - r.cached_tokens);
        hit_pos.push_back(r.cached_tokens);
      } else {
        miss_lens.push_back(r.prompt_len);
      }
    }
    const int h = static_cast<int>(hit_lens.size());
    if (h > 0) {
      checkpoint_load(ws_geo_, ws_view_, ws_codec_, scratch_view_, Dtype::fp32, cached_srcs_.data(),
                      ids_.data(), h, stream_);
      prefill_working(hit_lens, ids_.data(), ids_.data(), 1, o, hit_pos);
    }
    if (!miss_lens.empty())
      prefill_working(miss_lens, ids_.data() + h, ids_.data() + h, 1 + h, h == 0 ? o : nullptr);
  }
  void donate() {
    checkpoint_store(geo_, av_, s_.temporal, cv_, s_.checkpoint, cached_slot_.data(), one_.data(),
                     1, nullptr, stream_);
  }

  // Prefill of sequences of `lens` tokens (packed from the stream's start) into `slot_ids`, every
  // linear layer: the chunked kernel, as engines prefill (d_k = 128, d_v % 32 == 0), else the
  // recurrent one.
  void prefill(const std::vector<int64_t>& lens, const int32_t* slot_ids) {
    prefill(lens, slot_ids, active_.data(), s_.temporal);
  }
  // The same into `pool` ([L, slots, HV, d_v, d_k] in `dtype`).
  void prefill(const std::vector<int64_t>& lens, const int32_t* slot_ids, uint8_t* pool_base,
               Dtype dtype) {
    std::vector<int32_t> cu_host(lens.size() + 1, 0);
    int64_t longest = 0;
    for (size_t i = 0; i < lens.size(); ++i) {
      cu_host[i + 1] = cu_host[i] + static_cast<int32_t>(lens[i]);
      longest = std::max(longest, lens[i]);
    }
    if (cu_host.back() == 0) return;
    STATECHECK_CUDA_CHECK(cudaMemcpyAsync(cu_.data(), cu_host.data(), cu_host.size() * 4,
                                          cudaMemcpyHostToDevice, stream_));
    for (int l = 0; l < s_.layers; ++l) {
      uint8_t* pool = pool_base + static_cast<size_t>(l) * layer_elems_ * dtype_bytes(dtype);
      const GatedDeltaPoolArgs a =
          pool_args(s_.layer, dtype, pool, slots_, in_, 0, static_cast<int>(lens.size()), slot_ids,
                    cu_.data(), nullptr, static_cast<int>(longest));
      if (chunked_prefill_supported(a)) {
        ChunkedPrefillOptions opt;
        opt.total_tokens = cu_host.back();
        opt.workspace = chunk_ws_.data(), opt.workspace_bytes = chunk_ws_.bytes();
        chunked_prefill_pool(a, opt, stream_);
      } else {
        gated_delta_pool(a, stream_);
      }
    }
  }

  double matmul_tflops() override {
    if (matmul_tflops_ == 0.0) {
      GpuTimer timer;
      matmul_tflops_ = measure_mma_bf16_tflops(timer, 10);
    }
    return matmul_tflops_;
  }

  double elapsed_ms() {
    float ms = 0;
    STATECHECK_CUDA_CHECK(cudaEventSynchronize(e1_));
    STATECHECK_CUDA_CHECK(cudaEventElapsedTime(&ms, e0_, e1_));
    return static_cast<double>(ms);
  }

  // Key of the stochastic roundings of the working-state mode (unused by round to nearest).
  static constexpr uint64_t kWsSeed = 0;

  ServingShape s_;
  int slots_;  // 0 reserved, 1 .. parallel requests, the last the cached single-pool state
  size_t slot_elems_, layer_elems_;
  Codec copy_;  // the slot copy of the single-pool mode
  int ws_code_bytes_, ws_scale_bytes_;
  PoolGeometry geo_;
  // The working-state pool and the scratch seen as checkpoint pools (no conv window), and the
  // codec whose decode is the working format's: a hit decodes its cached slot with checkpoint_load.
  PoolGeometry ws_geo_;
  StatePoolView ws_view_, scratch_view_;
  Codec ws_codec_;
  DeviceBuffer<uint8_t> active_, ck_values_, ck_scales_;
  DeviceBuffer<uint8_t> ws_codes_, ws_scales_;  // the working-state pool
  DeviceBuffer<float> scratch_;                 // fp32 [L, slots, HV, d_v, d_k]: misses' prefill
  DeviceBuffer<uint8_t> chunk_ws_;              // the chunked prefill's workspace (split form)
  DeviceBuffer<uint16_t> active_conv_, ck_conv_;
  StatePoolView av_, cv_;
  LayerInputs host_in_;
  DeviceLayerInputs in_;
  // ids_: 1 .. parallel; cached_srcs_ / ckpt_srcs_: parallel copies of the cached active /
  // working slot and of checkpoint slot 1; batch_dst_: a batch's hit slots.
  DeviceBuffer<int32_t> ids_, one_, cached_slot_, cached_srcs_, ckpt_srcs_, batch_dst_;
  DeviceBuffer<int32_t> cu_, ws_cu_, ws_pos_, error_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
  double matmul_tflops_ = 0.0;
};

}  // namespace

std::unique_ptr<ServingBackend> cuda_serving_backend(const ServingShape& shape, int64_t max_prompt,
                                                     uint64_t seed) {
  return std::make_unique<CudaServingBackend>(shape, max_prompt, seed);
}

}  // namespace statecheck::cuda
