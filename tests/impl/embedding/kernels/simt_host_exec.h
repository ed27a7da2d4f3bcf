// The host executor of the single-source kernels (impl/embedding/kernels/simt/pipeline.h): warps
// run one after another on the calling thread (simt::HostWarp), and the device-wide steps are
// Thrust's algorithms on its CPU backend when the toolkit's CCCL headers are there (the same
// library the CUDA executor's siblings use), else the standard library's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "impl/core/simt.h"
#include "impl/embedding/kernels/simt/pipeline.h"

#if SHARDREC_TEST_HAVE_THRUST
#include <thrust/execution_policy.h>
#include <thrust/iterator/constant_iterator.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#endif

namespace shardrec::embedding::kernels::simt_body {

class HostExec {
 public:
  template <class Op>
  void Warps(int64_t count, const Op& op) {
    simt::HostWarp w(0);
    for (int64_t item = 0; item < count; ++item) op(w, item);
    launches_ += 1;
  }

  void SortPairs(const uint64_t* kin, uint64_t* kout, const uint32_t* vin, uint32_t* vout,
                 int64_t n, int end_bit) {
    const uint64_t mask = end_bit >= 64 ? ~uint64_t{0} : ((uint64_t{1} << end_bit) - 1);
    for (int64_t i = 0; i < n; ++i) {
      kout[i] = kin[i] & mask;
      vout[i] = vin[i];
    }
#if SHARDREC_TEST_HAVE_THRUST
    thrust::stable_sort_by_key(thrust::cpp::par, kout, kout + n, vout);
#else
    std::vector<int64_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int64_t a, int64_t b) { return kout[a] < kout[b]; });
    std::vector<uint64_t> k(kout, kout + n);
    std::vector<uint32_t> v(vout, vout + n);
    for (int64_t i = 0; i < n; ++i) {
      kout[i] = k[idx[i]];
      vout[i] = v[idx[i]];
    }
#endif
  }

  void RunLengthEncode(const uint64_t* keys, uint64_t* unique, int64_t* counts, int64_t* num_runs,
                       int64_t n) {
#if SHARDREC_TEST_HAVE_THRUST
    auto end = thrust::reduce_by_key(thrust::cpp::par, keys, keys + n,
                                     thrust::constant_iterator<int64_t>(1), unique, counts);
    *num_runs = end.first - unique;
#else
    int64_t r = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (i == 0 || keys[i] != keys[i - 1]) {
        unique[r] = keys[i];
        counts[r++] = 0;
      }
      ++counts[r - 1];
    }
    *num_runs = r;
#endif
  }

  void ExclusiveSum(const int64_t* in, int64_t* out, int64_t n) {
#if SHARDREC_TEST_HAVE_THRUST
    thrust::exclusive_scan(thrust::cpp::par, in, in + n, out);
#else
    int64_t s = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = in[i];
      out[i] = s;
      s += v;
    }
#endif
  }

  void Zero(void* p, size_t bytes) { std::memset(p, 0, bytes); }

  // The device runs one block per hot row: the tree's levels with a barrier between them, then
  // one team finishes the row. Here the same levels run one after another.
  template <class Op>
  void HotFinish(const Op& op, int64_t /*max_rows*/) {
    const int g = simt::TeamSizeForCols(op.a.cols);
    for (int64_t u = 0; u < *op.a.num_unique; ++u) {
      if (!op.IsHot(u)) continue;
      const int64_t m = op.Chunks(u);
      float* p = op.Partials(u);
      for (int64_t s = 1; s < m; s *= 2)
        for (int64_t i = 0; i + s < m; i += 2 * s)
          for (int64_t c = 0; c < op.a.cols; ++c) TreeAdd(p, op.a.cols, i, s, c);
      simt::HostTeam t(g, 0);
      op.Finish(t, u);
    }
  }

  int64_t launches() const { return launches_; }

 private:
  int64_t launches_ = 0;
};

// Host memory for one backward's arrays (what the CUDA side carves out of its workspace).
struct HostBackwardArrays {
  std::vector<uint64_t> keys, keys_sorted, unique;
  std::vector<uint32_t> pos, pos_sorted;
  std::vector<int64_t> grad_off, counts, seg, hot, hot_off;
  std::vector<float> factor, partials, scratch;
  int64_t num_unique = 0;
  DeviceStatus status;

  BackwardArrays Make(int64_t n, int32_t cols) {
    const size_t un = static_cast<size_t>(n), c = static_cast<size_t>(cols);
    keys.assign(un, 0);
    keys_sorted.assign(un, 0);
    unique.assign(un, 0);
    pos.assign(un, 0);
    pos_sorted.assign(un, 0);
    grad_off.assign(un, 0);
    factor.assign(un, 0.0f);
    counts.assign(un + 1, 0);
    seg.assign(un + 1, 0);
    hot.assign(un + 1, 0);
    hot_off.assign(un + 1, 0);
    partials.assign(static_cast<size_t>(MaxHotChunks(n)) * c, 0.0f);
    scratch.assign(simt::kWarpSize * c, 0.0f);  // one host warp: at most 32 teams
    BackwardArrays a;
    a.n = n;
    a.cols = cols;
    a.keys = keys.data();
    a.pos = pos.data();
    a.keys_sorted = keys_sorted.data();
    a.pos_sorted = pos_sorted.data();
    a.grad_off = grad_off.data();
    a.factor = factor.data();
    a.unique = unique.data();
    a.counts = counts.data();
    a.num_unique = &num_unique;
    a.seg = seg.data();
    a.hot = hot.data();
    a.hot_off = hot_off.data();
    a.partials = partials.data();
    a.scratch = scratch.data();
    a.status = &status;
    return a;
  }
};

}  // namespace shardrec::embedding::kernels::simt_body
