// Copies between global and shared memory: bulk copies by the tensor memory accelerator (TMA),
// with the transaction barriers (PTX mbarrier) that signal their completion, and per-thread
// 16-byte cp.async copies (copy_async16, sm_80 and later). sm_90 and later (PTX ISA 8.0:
// mbarrier expect_tx, cp.async.bulk, cp.async.bulk.commit_group / wait_group,
// fence.proxy.async). Addresses are 16-byte aligned and sizes multiples of 16 bytes, at most
// 2^20 - 1; the callers guarantee both.
//
// Loading (global -> shared): thread 0 calls init_copy_barrier, the block synchronises, thread 0
// calls bulk_copy_to_shared, and every thread that reads the data calls wait_copy_barrier with the
// barrier's phase parity (0 for its first use, then alternating).
// Storing (shared -> global): every thread that wrote the shared data calls
// fence_shared_to_async, the block synchronises, one thread calls bulk_copy_to_global; before the
// shared buffer is written again (or the block exits) that thread waits with
// wait_bulk_stores_read<N> (the source has been read) or wait_bulk_stores (the writes are done).
#pragma once

#include <cstdint>

namespace statecheck::cuda {

// Shared-memory address of a generic pointer to shared memory (for PTX operands).
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory without passing through registers (cp.async.cg); with
// valid == false the 16 bytes are zero-filled and nothing is read (src must still be a valid
// address). The copies of a thread complete at its wait_async_copies.
__device__ __forceinline__ void copy_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
               "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void wait_async_copies() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// Initialises a barrier that one arrival (the thread issuing the copy) plus the copy's bytes
// complete, and makes the initialisation visible to the async proxy.
__device__ __forceinline__ void init_copy_barrier(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Copies `bytes` from global `src` to shared `dst`; completion is signalled on `bar`.
__device__ __forceinline__ void bulk_copy_to_shared(void* dst, const void* src, uint32_t bytes,
                                                    uint64_t* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)),
               "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(shared_address(dst)),
      "l"(src), "r"(bytes), "r"(shared_address(bar))
      : "memory");
}

// Waits until the barrier's phase `parity` has completed (the copy has landed).
__device__ __forceinline__ void wait_copy_barrier(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
}

// Orders this thread's earlier writes to shared memory before later bulk copies that read it.
__device__ __forceinline__ void fence_shared_to_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Copies `bytes` from shared `src` to global `dst` as one bulk-copy group of the calling thread.
__device__ __forceinline__ void bulk_copy_to_global(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst),
               "r"(shared_address(src)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Waits until at most PENDING of the calling thread's bulk-copy groups have not yet read their
// shared source (older groups' buffers may be written again).
template <int PENDING>
__device__ __forceinline__ void wait_bulk_stores_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(PENDING) : "memory");
}

// Waits until all of the calling thread's bulk-copy groups have completed.
__device__ __forceinline__ void wait_bulk_stores() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

}  // namespace statecheck::cuda
