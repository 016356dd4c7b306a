// The LLTM over a sequence on CUDA: the persistent kernels (device code only; their plan and
// launch are lltm_sequence_launch.cu, the operator's entry points lltm_sequence_kernel.cu).
//
// Where the state fits on chip, each direction's recurrence is one cooperative
// ("persistent") launch instead of a product and a pointwise kernel per step from the
// host. Every block owns a slice of the state's columns j for the whole launch and keeps
// the weights those columns need in shared memory: forward the three rows of W_h that make
// gates (i, o, c) of column j, backward the column j of W_h. A step stages the previous h
// (forward) or the later step's d_gates (backward) from global memory, 16 bytes a load;
// each warp forms the dot products of its (batch row, column) pairs one after another with
// its lanes splitting each sum, then every lane applies the cell's pointwise maths
// (lltm_math.h, the same as every other kernel) to one pair, whose per-step loads it
// issued before the staging; a grid-wide barrier ends the step. The cell state and its
// gradient never leave the block (column j of the cell depends only on column j). Sums are
// in at::opmath_type; what is stored, and carried from step to step, is rounded to the
// tensor's dtype as the per-step kernels round it.
#pragma once

#include <ATen/OpMathType.h>
#include <cooperative_groups.h>

#include <cstdint>
#include <cstring>

#include "../lltm_math.h"

namespace tensortools::lltm::persistent {

namespace cg = cooperative_groups;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// A load through L2 only: the value was written by another block earlier in this launch,
// so no copy of it may come from this multiprocessor's L1.
template <typename T>
__device__ __forceinline__ T load_cg(const T* p) {
  if constexpr (sizeof(T) == 2) {
    const unsigned short bits = __ldcg(reinterpret_cast<const unsigned short*>(p));
    T v;
    memcpy(&v, &bits, sizeof(T));
    return v;
  } else {
    return __ldcg(p);
  }
}

// Copies n values from global memory (written by other blocks in this launch, so read
// through L2 only) into shared memory as opmath_t, 16 bytes a load where `src` allows,
// each thread's loads all issued before its first store. `dst` is 16-byte aligned.
template <typename scalar_t, typename opmath_t>
__device__ __forceinline__ void stage(opmath_t* dst, const scalar_t* src, int n) {
  constexpr int kVec = 16 / sizeof(scalar_t);
  constexpr int kUnroll = 8;
  int done = 0;
  if (reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    const int nv = n / kVec;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    for (int base = threadIdx.x; base < nv; base += kThreads * kUnroll) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * kThreads;
        if (i < nv) {
          v[u] = __ldcg(s + i);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * kThreads;
        if (i < nv) {
          scalar_t e[kVec];
          memcpy(e, &v[u], sizeof(e));
          alignas(16) opmath_t o[kVec];
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            o[k] = static_cast<opmath_t>(e[k]);
          }
#pragma unroll
          for (int q = 0; q < static_cast<int>(sizeof(o) / 16); ++q) {
            reinterpret_cast<uint4*>(dst + i * kVec)[q] = reinterpret_cast<const uint4*>(o)[q];
          }
        }
      }
    }
    done = nv * kVec;
  }
  for (int base = done + threadIdx.x; base < n; base += kThreads * kUnroll) {
    scalar_t v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads;
      if (i < n) {
        v[u] = load_cg(src + i);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads;
      if (i < n) {
        dst[i] = static_cast<opmath_t>(v[u]);
      }
    }
  }
}

// A block's (batch row, column) pairs are taken in rounds of 32 per warp: in a round, warp
// w forms the sums of pairs base + w + i * kWarps (i < 32) one after another, all lanes
// splitting each sum, and lane i keeps the i-th; then every lane finishes its own pair at
// once. Lane i's loads for its pair are issued at the start of the step, before the
// staging, so their latency overlaps it.
struct Round {
  int pairs_here;  // how many pairs this warp has in this round (0 to 32)
  int mine;        // the pair this lane finishes, valid where lane < pairs_here
  __device__ Round(int base, int pairs, int warp, int lane) {
    const int rest = pairs - base - warp;
    pairs_here = rest > 0 ? min(32, (rest + kWarps - 1) / kWarps) : 0;
    mine = base + warp + lane * kWarps;
  }
  __device__ int pair(int base, int warp, int i) const { return base + warp + i * kWarps; }
};

// Forward. gates: T×B×3S, the input share on entry (and the activated gates on exit where
// kKeep); weights: row r of W_h at weights + r * ldw; output T×B×S; cells T×B×S (kKeep).
// Block b owns columns [blockIdx.x * cols, + cols) of the state.
template <typename scalar_t, bool kKeep>
__global__ void __launch_bounds__(kThreads)
    sequence_forward_kernel(scalar_t* gates, const scalar_t* __restrict__ weights, int64_t ldw,
                            const scalar_t* __restrict__ h0, const scalar_t* __restrict__ c0,
                            scalar_t* output, scalar_t* __restrict__ h_n,
                            scalar_t* __restrict__ c_n, scalar_t* __restrict__ cells, int T, int B,
                            int S, int cols) {
  using opmath_t = at::opmath_type<scalar_t>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  opmath_t* h_s = reinterpret_cast<opmath_t*>(smem_raw);  // [B][S], staged each step
  opmath_t* w_s = h_s + B * S;                            // [3][cols][S]
  opmath_t* c_s = w_s + 3 * cols * S;                     // [B][cols]
  const int j0 = blockIdx.x * cols;
  const int nj = min(cols, S - j0);
  const int pairs = B * nj;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  for (int idx = tid; idx < 3 * nj * S; idx += kThreads) {
    const int k = idx % S, row = idx / S, g = row / nj, jj = row % nj;
    w_s[(g * cols + jj) * S + k] =
        static_cast<opmath_t>(weights[static_cast<int64_t>(g * S + j0 + jj) * ldw + k]);
  }
  for (int idx = tid; idx < pairs; idx += kThreads) {
    const int b = idx / nj, jj = idx % nj;
    c_s[b * cols + jj] = static_cast<opmath_t>(c0[b * S + j0 + jj]);
  }
  __syncthreads();  // other threads than these read w_s and c_s
  cg::grid_group grid = cg::this_grid();
  const int BS = B * S;
  for (int t = 0; t < T; ++t) {
    for (int base = 0; base < pairs; base += 32 * kWarps) {
      const Round round(base, pairs, warp, lane);
      const bool finishing = lane < round.pairs_here;
      const int b = round.mine / nj, jj = round.mine % nj, j = j0 + jj;
      scalar_t* g = gates + (t * B + b) * 3 * S;
      opmath_t i = 0, o = 0, c = 0;
      if (finishing) {
        i = static_cast<opmath_t>(g[j]);
        o = static_cast<opmath_t>(g[S + j]);
        c = static_cast<opmath_t>(g[2 * S + j]);
      }
      if (base == 0) {
        stage(h_s, t == 0 ? h0 : output + (t - 1) * BS, BS);
        __syncthreads();
      }
      for (int q = 0; q < round.pairs_here; ++q) {
        const int p = round.pair(base, warp, q);
        const opmath_t* hb = h_s + (p / nj) * S;
        const opmath_t* wi = w_s + (p % nj) * S;
        const opmath_t* wo = wi + cols * S;
        const opmath_t* wc = wo + cols * S;
        opmath_t si = 0, so = 0, sc = 0;
        for (int k = lane; k < S; k += 32) {
          const opmath_t h = hb[k];
          si += h * wi[k];
          so += h * wo[k];
          sc += h * wc[k];
        }
        si = warp_sum(si);
        so = warp_sum(so);
        sc = warp_sum(sc);
        if (lane == q) {
          i += si;
          o += so;
          c += sc;
        }
      }
      if (finishing) {
        opmath_t nc, nh;
        forward_element<opmath_t>(i, o, c, c_s[b * cols + jj], nc, nh);
        const scalar_t new_cell = static_cast<scalar_t>(nc), new_h = static_cast<scalar_t>(nh);
        c_s[b * cols + jj] = static_cast<opmath_t>(new_cell);
        output[t * BS + b * S + j] = new_h;
        if constexpr (kKeep) {
          g[j] = static_cast<scalar_t>(i);
          g[S + j] = static_cast<scalar_t>(o);
          g[2 * S + j] = static_cast<scalar_t>(c);
          cells[t * BS + b * S + j] = new_cell;
        }
        if (t == T - 1) {
          h_n[b * S + j] = new_h;
          c_n[b * S + j] = new_cell;
        }
      }
    }
    if (t + 1 < T) {
      __threadfence();
      grid.sync();
    }
  }
}

// Backward. Per step t (last to first): grad_h = grad_output[t] (+ grad_h_n at the last
// step) + d_gates[t+1] @ W_h, then the cell's backward gives d_gates[t] and the gradient
// of the old cell. At the end d_h0 = d_gates[0] @ W_h. Block b owns columns j as forward
// and keeps column j of W_h ([cols][3S]).
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    sequence_backward_kernel(const scalar_t* __restrict__ grad_output,
                             const scalar_t* __restrict__ grad_h_n,
                             const scalar_t* __restrict__ grad_c_n,
                             const scalar_t* __restrict__ weights, int64_t ldw,
                             const scalar_t* __restrict__ gates, const scalar_t* __restrict__ cells,
                             scalar_t* d_gates, scalar_t* __restrict__ d_h0,
                             scalar_t* __restrict__ d_c0, int T, int B, int S, int cols) {
  using opmath_t = at::opmath_type<scalar_t>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int S3 = 3 * S;
  opmath_t* dg_s = reinterpret_cast<opmath_t*>(smem_raw);  // [B][3S], staged each step
  opmath_t* w_s = dg_s + B * S3;                           // [cols][3S]
  opmath_t* gc_s = w_s + cols * S3;                        // [B][cols]
  const int j0 = blockIdx.x * cols;
  const int nj = min(cols, S - j0);
  const int pairs = B * nj;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  for (int idx = tid; idx < nj * S3; idx += kThreads) {
    const int r = idx / nj, jj = idx % nj;
    w_s[jj * S3 + r] = static_cast<opmath_t>(weights[static_cast<int64_t>(r) * ldw + j0 + jj]);
  }
  for (int idx = tid; idx < pairs; idx += kThreads) {
    const int b = idx / nj, jj = idx % nj;
    gc_s[b * cols + jj] = static_cast<opmath_t>(grad_c_n[b * S + j0 + jj]);
  }
  __syncthreads();  // other threads than these read w_s and gc_s, the last step unstaged
  // Lane q of the warp keeps the q-th of this round's sums of d_gates[staged] @ W_h.
  auto recurrent_sums = [&](int base, const Round& round) {
    opmath_t kept = 0;
    for (int q = 0; q < round.pairs_here; ++q) {
      const int p = round.pair(base, warp, q);
      const opmath_t* d = dg_s + (p / nj) * S3;
      const opmath_t* w = w_s + (p % nj) * S3;
      opmath_t acc = 0;
      for (int r = lane; r < S3; r += 32) {
        acc += d[r] * w[r];
      }
      acc = warp_sum(acc);
      if (lane == q) {
        kept = acc;
      }
    }
    return kept;
  };

  cg::grid_group grid = cg::this_grid();
  const int BS = B * S;
  for (int t = T - 1; t >= 0; --t) {
    for (int base = 0; base < pairs; base += 32 * kWarps) {
      const Round round(base, pairs, warp, lane);
      const bool finishing = lane < round.pairs_here;
      const int b = round.mine / nj, jj = round.mine % nj, j = j0 + jj;
      const int h_at = t * BS + b * S + j, g_at = (t * B + b) * S3;
      opmath_t grad_h = 0, ig = 0, og = 0, cc = 0, new_cell = 0;
      if (finishing) {
        grad_h = static_cast<opmath_t>(grad_output[h_at]);
        if (t == T - 1) {
          grad_h += static_cast<opmath_t>(grad_h_n[b * S + j]);
        }
        ig = static_cast<opmath_t>(gates[g_at + j]);
        og = static_cast<opmath_t>(gates[g_at + S + j]);
        cc = static_cast<opmath_t>(gates[g_at + 2 * S + j]);
        new_cell = static_cast<opmath_t>(cells[h_at]);
      }
      if (t < T - 1) {
        if (base == 0) {
          stage(dg_s, d_gates + (t + 1) * B * S3, B * S3);
          __syncthreads();
        }
        grad_h += recurrent_sums(base, round);
      }
      if (finishing) {
        opmath_t d_i, d_o, d_c, d_oc;
        backward_element<opmath_t>(ig, og, cc, new_cell, grad_h, gc_s[b * cols + jj], d_i, d_o, d_c,
                                   d_oc);
        d_gates[g_at + j] = static_cast<scalar_t>(d_i);
        d_gates[g_at + S + j] = static_cast<scalar_t>(d_o);
        d_gates[g_at + 2 * S + j] = static_cast<scalar_t>(d_c);
        const scalar_t d_old_cell = static_cast<scalar_t>(d_oc);
        gc_s[b * cols + jj] = static_cast<opmath_t>(d_old_cell);
        if (t == 0) {
          d_c0[b * S + j] = d_old_cell;
        }
      }
    }
    __threadfence();
    grid.sync();
  }
  stage(dg_s, d_gates, B * S3);
  __syncthreads();
  for (int base = 0; base < pairs; base += 32 * kWarps) {
    const Round round(base, pairs, warp, lane);
    const opmath_t sum = recurrent_sums(base, round);
    if (lane < round.pairs_here) {
      d_h0[(round.mine / nj) * S + j0 + round.mine % nj] = static_cast<scalar_t>(sum);
    }
  }
}

}  // namespace tensortools::lltm::persistent
