// Thread-block clusters (sm_90): a CTA's rank in its cluster, the cluster barrier, and stores into another CTA's
// shared memory that complete on that CTA's mbarrier. Thin verbs over CCCL's cuda::ptx and the runtime's cluster
// builtins.
#pragma once

#include <cuda/ptx>

#include <cstdint>

namespace flashgate::ptx {

__device__ __forceinline__ uint32_t cluster_rank() { return ::cuda::ptx::get_sreg_cluster_ctarank(); }

// Every thread of every CTA in the cluster arrives (from any code path: not .aligned) and waits for the others; what
// each wrote before is visible to all after.
__device__ __forceinline__ void cluster_sync() {
  ::cuda::ptx::barrier_cluster_arrive(::cuda::ptx::sem_release);
  ::cuda::ptx::barrier_cluster_wait();
}

// The address of `local`'s counterpart in the shared memory of the cluster's CTA `rank`.
template <class T>
__device__ __forceinline__ T* peer_shared(T* local, uint32_t rank) {
  return static_cast<T*>(__cluster_map_shared_rank(local, rank));
}

// Four words into another CTA's shared memory (`remote`, from peer_shared) that count as 16 transaction bytes on its
// barrier `remote_bar` (whose phase expects them, as it would a TMA copy's).
__device__ __forceinline__ void store_to_peer(float* remote, const float (&v)[4], uint64_t* remote_bar) {
  ::cuda::ptx::st_async(remote, v, remote_bar);
}

// `bytes` of this CTA's shared memory (`local`, 16-byte aligned, written by the generic proxy and fenced for the
// async one) copied by the copy engine into another CTA's (`remote`, from peer_shared), counting as transaction bytes
// on its barrier `remote_bar`. Only that barrier tells when `local` has been read.
__device__ __forceinline__ void copy_to_peer(void* remote, const void* local, uint32_t bytes, uint64_t* remote_bar) {
  ::cuda::ptx::cp_async_bulk(::cuda::ptx::space_cluster, ::cuda::ptx::space_shared, remote, local, bytes, remote_bar);
}

// An arrival on another CTA's barrier (`remote_bar`, from peer_shared) that says this thread is done reading what
// that CTA stored here. Relaxed: it orders nothing, so the caller arrives only once its reads are served (for
// example after storing values made from them), since the other CTA may write again as soon as it sees the arrival.
// A release at cluster scope is a MEMBAR.GPU in SASS, which waits for every global reduction the thread still has
// in flight; cluster pipelines' remote releases (the default `mbarrier.arrive.shared::cluster`, release at CTA scope)
// compile to the same fence-free arrival as this one.
__device__ __forceinline__ void arrive_on_peer(uint64_t* remote_bar) {
  ::cuda::ptx::mbarrier_arrive(::cuda::ptx::sem_relaxed, ::cuda::ptx::scope_cluster, ::cuda::ptx::space_cluster,
                               remote_bar);
}

}  // namespace flashgate::ptx
