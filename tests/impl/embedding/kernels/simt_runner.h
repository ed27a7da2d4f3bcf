// Runs the single-source kernel bodies on the CPU with the arguments of the CPU twins
// (kernels.h): the lookup over host warps, the backward through the host executor. Included by
// exactly one test executable each (the bit-exact one and the contracted one are built with
// different floating-point flags, so their instantiations must not meet in one binary).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/kernels/simt/lookup_body.h"
#include "impl/embedding/kernels/simt/pipeline.h"
#include "tests/impl/embedding/kernels/simt_host_exec.h"

namespace shardrec::embedding::kernels::simt_body {

inline LookupJobDesc Describe(const LookupJob& j) {
  LookupJobDesc d;
  d.weights = j.weights.data;
  d.rows = j.weights.rows;
  d.stride = j.weights.stride;
  d.offsets = j.run.offsets;
  d.ids = j.run.rows;
  d.id_weights = j.run.weights;
  d.out = j.out;
  d.io_offset = j.run.io_offset;
  d.out_stride = j.out_stride;
  d.num_bags = j.run.num_bags;
  d.cols = j.weights.cols;
  d.dtype = static_cast<int32_t>(j.weights.dtype);
  return d;
}

// Every job, kMaxLookupJobs per launch; returns the number of launches.
inline int RunLookup(std::span<const LookupJob> jobs, DeviceStatus* status) {
  auto p = std::make_unique<LookupParams>();
  int launches = 0;
  for (size_t first = 0; first < jobs.size(); first += kMaxLookupJobs) {
    p->num_jobs = 0;
    p->status = status;
    int64_t items = 0;
    for (size_t j = first; j < jobs.size() && j < first + kMaxLookupJobs; ++j) {
      if (jobs[j].weights.cols <= 0) continue;
      LookupJobDesc d = Describe(jobs[j]);
      p->first_item[p->num_jobs] = items;
      items += PrepareJob(d);
      p->jobs[p->num_jobs++] = d;
    }
    p->first_item[p->num_jobs] = items;
    simt::HostWarp w(0);
    for (int64_t item = 0; item < items; ++item) LookupItem(w, *p, item);
    ++launches;
  }
  return launches;
}

// As the CUDA launcher does (cuda/backward.cu): any number of runs, kMaxRuns per run table.
inline RunSlices MakeRunSlices(std::span<const BagRun> runs) {
  RunSlices rs;
  for (const BagRun& r : runs)
    rs.Add(RunTable::Run{r.offsets, r.rows, r.weights, r.io_offset, r.num_bags}, r.num_ids());
  return rs;
}

// GroupSteps (+ GateSteps with `gate` or `count_out`) + RowSteps on the host; `sink` says fused
// update or aggregated outputs.
struct SimtBackward {
  HostBackwardArrays mem;
  BackwardArrays a;
  HostExec ex;

  void Run(std::span<const BagRun> runs, int64_t num_rows, const float* grads, int64_t grad_stride,
           int32_t cols, float scale, const RowSink& sink, const int64_t* gate = nullptr,
           int64_t* count_out = nullptr) {
    const RunSlices rs = MakeRunSlices(runs);
    a = mem.Make(rs.num_ids(), cols);
    GroupSteps(ex, rs, a, num_rows);
    GateSteps(ex, a, gate, count_out);
    RowSteps(ex, rs, a, grads, grad_stride, scale, sink);
  }
};

}  // namespace shardrec::embedding::kernels::simt_body
