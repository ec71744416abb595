// Consumer (and test producer) side of the counting table.
//
// The GEMM bumps counter[group] once per finished tile (red.release.gpu add). The communication
// stream runs one `wait_counter` launch per group before that group's collective: a single thread
// spins with an acquire load until the counter reaches the call's target. Counters are never reset:
// call number `epoch` (1, 2, ...) waits for target = epoch * tiles_in_group, compared modulo 2^32
// (`fo::counter_reached`), so back-to-back calls need no memset between them.
//
// Failure is reported, never hung on: past `timeout_ns` of %globaltimer the wait writes group + 1
// into a device error word (atomicCAS from 0: the first failure wins) and returns, letting the
// stream drain. A wait that finds the error word already set returns at once, so one failure costs
// one timeout, not one per later group. The host reads the word after synchronizing
// (fo_lib.counting.check_wait_error).
//
// Generated entry points (fo_lib/counting.py), each launched with one block of one thread:
//   extern "C" __global__ void fo_wait_counter(const u32* counter, int group, u32 target,
//                                              u32* error, u64 timeout_ns)
//   extern "C" __global__ void fo_wait_epoch(const u32* counter, int group, u32 group_tiles,
//                                            const u32* epoch, u32* error, u64 timeout_ns)
//   extern "C" __global__ void fo_bump_counter(u32* counter, int group, u32 value)
#pragma once
#include "common.cuh"

namespace fo {

__device__ __forceinline__ u32 ld_relaxed_gpu(const u32* p) {
    u32 v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void nanosleep_ns(u32 ns) { asm volatile("nanosleep.u32 %0;" ::"r"(ns)); }

// Spin until counter[group] reaches target (modulo 2^32) or timeout_ns elapse.
// Returns true when the target was reached; false on timeout (error word set) or when an earlier
// failure was already recorded in *error.
__device__ __forceinline__ bool wait_counter(const u32* counter, int group, u32 target, u32* error,
                                             u64 timeout_ns) {
    if (ld_relaxed_gpu(error) != 0u) return false;  // an earlier wait failed: do not add a timeout
    const u32* p = counter + group;
    if (counter_reached(ld_acquire_gpu(p), target)) return true;
    const u64 t0 = globaltimer_ns();
    u32 sleep = 32;
    for (;;) {
        nanosleep_ns(sleep);
        sleep = sleep < 1024u ? sleep * 2u : 1024u;
        if (counter_reached(ld_acquire_gpu(p), target)) return true;
        if (globaltimer_ns() - t0 > timeout_ns) {
            // Last look before declaring failure (the sleep may have overslept the deadline).
            if (counter_reached(ld_acquire_gpu(p), target)) return true;
            atomicCAS(error, 0u, u32(group) + 1u);
            __threadfence();
            return false;
        }
        // Another stream's wait may have failed meanwhile: stop early too.
        if (ld_relaxed_gpu(error) != 0u) return false;
    }
}

// Producer side for tests and host-driven signalling: counter[group] += value with release
// semantics (everything this thread's stream wrote before is visible to the acquiring waiter).
__device__ __forceinline__ void bump_counter(u32* counter, int group, u32 value) {
    __threadfence();  // order prior writes of *other* threads of this kernel too (cheap: one thread)
    red_release_gpu_add(counter + group, value);
}

}  // namespace fo
